//! Association of ranks, GPUs and hosts across exporter label conventions.
//!
//! Exporters name the same worker differently: the PyTorch application labels by `rank` (or
//! `local_rank`), NCCL Inspector by `gpu` and `slurm_job_id` (sometimes `rank`), dcgm-exporter
//! by `gpu` and `UUID` (with `pod`/`namespace` when Kubernetes labels are on), node_exporter
//! only by host. A worker is `(host, gpu, rank)`; whatever a series does not carry is filled in
//! from any other series that links two of them (a series with both `rank` and `gpu`, a
//! dcgm series with `gpu` and `UUID`, `local_rank` = the GPU index on its host). When nothing
//! links the rank, the host is the fallback: a node-level series serves every GPU of its node.

use std::collections::HashMap;

use super::context::{JobContext, SeriesMeta};

/// Who a per-rank (or per-GPU, or per-node) series is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Worker {
    /// Host (always known: every series has one).
    pub host: String,
    /// Global rank, when known or linked.
    pub rank: Option<String>,
    /// GPU index on the host, when known or linked.
    pub gpu: Option<String>,
}

/// Links between ranks, GPU indices and GPU UUIDs, learnt from the job's series.
#[derive(Debug, Default)]
pub(crate) struct Assoc {
    rank_to_gpu: HashMap<String, (String, String)>,
    gpu_to_rank: HashMap<(String, String), String>,
    uuid_to_gpu: HashMap<String, (String, String)>,
}

/// The GPU index a series names directly: `gpu` (`5`, `GPU5`, `gpu5`), `gpu_device_id`, or
/// `local_rank` (the device index on its host under the usual one-process-per-GPU launch).
fn own_gpu(m: &SeriesMeta) -> Option<String> {
    let raw = m.label("gpu").or_else(|| m.label("gpu_device_id")).or_else(|| m.label("local_rank"))?;
    let digits = raw.trim_start_matches("GPU").trim_start_matches("gpu");
    Some(if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) { digits } else { raw }.to_string())
}

fn own_uuid(m: &SeriesMeta) -> Option<&str> {
    m.label("UUID").or_else(|| m.label("gpu_uuid")).or_else(|| m.label("uuid"))
}

impl Assoc {
    /// Learns the links from every series of the job (one pass; no per-pair work).
    pub fn new(ctx: &JobContext) -> Assoc {
        let mut a = Assoc::default();
        for m in &ctx.series {
            let gpu = own_gpu(m);
            if let (Some(uuid), Some(g)) = (own_uuid(m), gpu.as_ref()) {
                a.uuid_to_gpu.entry(uuid.to_string()).or_insert_with(|| (m.host.clone(), g.clone()));
            }
            if let (Some(rank), Some(g)) = (m.label("rank"), gpu) {
                a.rank_to_gpu.entry(rank.to_string()).or_insert_with(|| (m.host.clone(), g.clone()));
                a.gpu_to_rank.entry((m.host.clone(), g)).or_insert_with(|| rank.to_string());
            }
        }
        a
    }

    /// The worker a series is about, with the missing parts linked where possible.
    pub fn worker(&self, m: &SeriesMeta) -> Worker {
        let rank = m.label("rank").map(str::to_string);
        let mut host = m.host.clone();
        let mut gpu = own_gpu(m);
        if gpu.is_none()
            && let Some((h, g)) = own_uuid(m).and_then(|u| self.uuid_to_gpu.get(u))
        {
            host = h.clone();
            gpu = Some(g.clone());
        }
        if gpu.is_none()
            && let Some((h, g)) = rank.as_ref().and_then(|r| self.rank_to_gpu.get(r))
            && *h == host
        {
            gpu = Some(g.clone());
        }
        let rank =
            rank.or_else(|| gpu.as_ref().and_then(|g| self.gpu_to_rank.get(&(host.clone(), g.clone())).cloned()));
        Worker { host, rank, gpu }
    }

    /// The series among `candidates` that serves `who`: the same rank, else the same GPU on the
    /// same host, else a node-level series of the host (no rank and no GPU), else — ranks that
    /// cannot be matched — the host's series `pick` prefers (e.g. the largest change).
    pub fn serving<'a, T>(
        &self,
        who: &Worker,
        candidates: &'a [T],
        meta: impl Fn(&T) -> &SeriesMeta,
        pick: impl Fn(&T, &T) -> std::cmp::Ordering,
    ) -> Option<(&'a T, &'static str)> {
        let workers: Vec<Worker> = candidates.iter().map(|c| self.worker(meta(c))).collect();
        let pairs = || candidates.iter().zip(&workers);
        if let Some(r) = &who.rank
            && let Some((c, _)) = pairs().find(|(_, w)| w.rank.as_ref() == Some(r))
        {
            return Some((c, "rank"));
        }
        if let Some(g) = &who.gpu
            && let Some((c, _)) = pairs().find(|(_, w)| w.host == who.host && w.gpu.as_ref() == Some(g))
        {
            return Some((c, "gpu"));
        }
        if let Some((c, _)) = pairs().find(|(_, w)| w.host == who.host && w.rank.is_none() && w.gpu.is_none()) {
            return Some((c, "node"));
        }
        pairs().filter(|(_, w)| w.host == who.host).map(|(c, _)| c).max_by(|a, b| pick(a, b)).map(|c| (c, "host"))
    }
}
