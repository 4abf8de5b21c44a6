//! What a run writes besides samples: `topology.json`, `jobs.json` and the hosts' clock
//! offset observations.

use lockstep_engine::Store;
use lockstep_engine::clock::OffsetObservation;
use lockstep_engine::model::SEC;

use super::scenario::Plan;
use super::{GPUS, JOB, NEIGHBOUR, NEIGHBOUR_SLURM_ID, NICS, OTHER, POOL, SLURM_ID};

/// The hosts of a run: the job's nodes, the other job's node, the neighbour job's nodes and
/// the storage servers.
#[derive(Clone, Copy)]
pub(super) struct Hosts<'a> {
    pub(super) job: &'a [String],
    pub(super) aux: &'a str,
    pub(super) neighbours: &'a [String],
    pub(super) servers: &'a [String],
}

/// `topology.json` and `jobs.json`.
pub(super) fn write_documents(store: &Store, names: &Hosts<'_>, start: i64, end: i64) -> lockstep_engine::Result<()> {
    let Hosts { job: hosts, aux, neighbours, servers } = *names;
    let nic_json = |n: usize| {
        (0..NICS)
            .map(|k| {
                format!(
                    r#"{{"device":"mlx5_{k}","port":1,"fabric":"infiniband","switch":"lf{}","switch_port":{}}}"#,
                    k,
                    n + 1
                )
            })
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut node_docs: Vec<String> = hosts
        .iter()
        .enumerate()
        .map(|(n, h)| format!(r#"{{"name":"{h}","gpus":{GPUS},"nics":[{}]}}"#, nic_json(n)))
        .collect();
    node_docs.push(format!(r#"{{"name":"{aux}","gpus":{GPUS},"nics":[{}]}}"#, nic_json(hosts.len())));
    for (i, h) in neighbours.iter().enumerate() {
        node_docs.push(format!(r#"{{"name":"{h}","gpus":{GPUS},"nics":[{}]}}"#, nic_json(hosts.len() + 1 + i)));
    }
    let leaves: Vec<String> = (0..NICS)
        .map(|k| format!(r#"{{"name":"lf{k}","tier":"leaf","links":[{{"port":200,"peer":"sp0","peer_port":{k}}}]}}"#))
        .collect();
    let servers_json: Vec<String> = servers
        .iter()
        .enumerate()
        .map(|(i, s)| {
            format!(
                r#"{{"name":"{s}","nics":[{{"device":"mlx5_0","port":1,"fabric":"infiniband","switch":"lf0","switch_port":{}}}]}}"#,
                150 + i
            )
        })
        .collect();
    let topology = format!(
        r#"{{"nodes":[{}],"switches":[{},{{"name":"sp0","tier":"spine"}}],"storage_pools":[{{"name":"{POOL}","kind":"weka","servers":[{}]}}]}}"#,
        node_docs.join(","),
        leaves.join(","),
        servers_json.join(",")
    );
    store.write_document("topology.json", &topology)?;
    let list = |hs: &[String]| hs.iter().map(|h| format!("\"{h}\"")).collect::<Vec<_>>().join(",");
    let jobs = format!(
        r#"[{{"job":"{JOB}","nodes":[{}],"start":{start},"end":{end},"storage_pool":"{POOL}","slurm_job_id":"{SLURM_ID}"}},
            {{"job":"{OTHER}","nodes":["{aux}"],"start":{start},"end":{end},"storage_pool":"{POOL}"}},
            {{"job":"{NEIGHBOUR}","nodes":[{}],"start":{start},"end":{end},"storage_pool":"{POOL}","slurm_job_id":"{NEIGHBOUR_SLURM_ID}"}}]"#,
        list(hosts),
        list(neighbours)
    );
    store.write_document("jobs.json", &jobs).map(|_| ())
}

/// Chrony-like offset observations every 30 s (±1 ms), following each host's clock steps.
pub(super) fn write_clocks(
    store: &Store,
    plan: &Plan,
    names: &Hosts<'_>,
    start: i64,
    end: i64,
) -> lockstep_engine::Result<()> {
    let Hosts { job: hosts, aux, neighbours, servers } = *names;
    let mut obs = Vec::new();
    let all_hosts =
        hosts.iter().map(String::as_str).chain(std::iter::once(aux)).chain(neighbours.iter().map(String::as_str));
    for (i, h) in all_hosts.enumerate() {
        let c = plan.clocks[i];
        let mut t = start - 120 * SEC;
        while t <= end + 120 * SEC {
            obs.push(OffsetObservation {
                host: h.to_string(),
                local_time: c.local(t),
                offset_ns: c.offset_at(t),
                uncertainty_ns: 1_000_000,
            });
            t += 30 * SEC;
        }
    }
    for s in servers {
        obs.push(OffsetObservation { host: s.clone(), local_time: start, offset_ns: 0, uncertainty_ns: 1_000_000 });
        obs.push(OffsetObservation { host: s.clone(), local_time: end, offset_ns: 0, uncertainty_ns: 1_000_000 });
    }
    store.with_clocks(|r| {
        r.add_offsets(&obs)?;
        r.refit().map(|_| ())
    })
}
