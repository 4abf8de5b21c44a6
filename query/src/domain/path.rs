//! `topology_path('from', 'to')`: the fabric hops between a node and another node or a
//! storage pool.
//!
//! Columns: `route` (0-based index of the NIC pair), `src` and `dst` (NIC port entities),
//! `level` (ports from the source: 0 source NIC, 1 its leaf port, …; several entities share
//! a level where ECMP offers parallel spines), `entity`, `entity_kind`. Pairing rules:
//! rail-aligned NICs between nodes, every NIC pair on a shared fabric to a pool's servers
//! (see `docs/topology.md`). Unknown names are errors; unreachable pairs give no rows.

use std::sync::Arc;

use arrow::array::{RecordBatch, StringBuilder, UInt32Builder};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::catalog::{TableFunctionArgs, TableFunctionImpl, TableProvider};
use datafusion::error::Result;
use lockstep_engine::topology::PathFinder;

use crate::domain::{DomainModel, engine_error, memtable, string_args};

/// The `topology_path` table function.
#[derive(Debug)]
pub struct TopologyPathFunc {
    model: Arc<DomainModel>,
}

impl TopologyPathFunc {
    /// A function over `model`.
    pub fn new(model: Arc<DomainModel>) -> Self {
        TopologyPathFunc { model }
    }
}

impl TableFunctionImpl for TopologyPathFunc {
    fn call_with_args(&self, args: TableFunctionArgs) -> Result<Arc<dyn TableProvider>> {
        let [from, to] = string_args::<2>(&args, "topology_path")?;
        let topology = &self.model.topology;
        let mut finder = PathFinder::new(topology);
        let routes = if topology.pool(&to).is_some() && topology.node(&to).is_none() {
            finder.pool_routes(&from, &to)
        } else {
            finder.node_routes(&from, &to)
        }
        .map_err(engine_error)?;
        let (mut route, mut level) = (UInt32Builder::new(), UInt32Builder::new());
        let (mut src, mut dst) = (StringBuilder::new(), StringBuilder::new());
        let (mut entity, mut kind) = (StringBuilder::new(), StringBuilder::new());
        for (i, r) in routes.iter().enumerate() {
            for hop in &r.hops {
                route.append_value(i as u32);
                src.append_value(&r.src);
                dst.append_value(&r.dst);
                level.append_value(hop.level);
                entity.append_value(&hop.entity);
                kind.append_value(hop.kind.as_str());
            }
        }
        let schema = Schema::new(vec![
            Field::new("route", DataType::UInt32, false),
            Field::new("src", DataType::Utf8, false),
            Field::new("dst", DataType::Utf8, false),
            Field::new("level", DataType::UInt32, false),
            Field::new("entity", DataType::Utf8, false),
            Field::new("entity_kind", DataType::Utf8, false),
        ]);
        let batch = RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(route.finish()),
                Arc::new(src.finish()),
                Arc::new(dst.finish()),
                Arc::new(level.finish()),
                Arc::new(entity.finish()),
                Arc::new(kind.finish()),
            ],
        )?;
        memtable(batch)
    }
}
