//! Which partition reads which unit, decided while the scan runs: each partition reads its own
//! units (the static assignment, balanced by rows) from the front, and a partition that has
//! run out takes units from the back of the list of the running partition with the most left.
//!
//! A static assignment balances rows, not time: units decode at different speeds (compression,
//! value coding, the page cache) and a shared machine stops threads at random, so on a 2-core
//! full scan the two partitions ended 33–57 ms apart in a 0.35 s scan. Taking units from the
//! slowest partition ends them together, to within one unit (a row group: 2–3 ms of decoding).
//!
//! Each unit is read by exactly one partition of one execution ("round"): a partition claims a
//! unit by setting its flag, whichever end it comes from. An execution is known by the task
//! context its partitions are executed with (DataFusion passes one `Arc<TaskContext>` to every
//! partition of one execution), so executions that overlap in time keep apart. A round begins
//! with the first `execute` under a context and lasts while any of its partitions runs;
//! executing a partition that already ran in the live round of its context (a re-execution)
//! begins a new round, in which that partition reads its own units again. Units are taken only
//! from partitions that are running (executed and not yet ended): the units of a partition that
//! is never executed are left alone, as they were with the static assignment, and a partition
//! executed under a context of its own reads exactly its own units. A partition ends when its
//! [`Reading`] is dropped: when its reading thread returns, or with the task if the stream was
//! dropped before the thread ever ran.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use datafusion::execution::TaskContext;

/// The rounds of one scan plan: the live round of each task context executing it.
#[derive(Debug, Default)]
pub(super) struct Rounds(Mutex<Vec<(Weak<TaskContext>, Weak<Round>)>>);

impl Rounds {
    /// The round partition `partition` of `assignment`, executed under `context`, joins: the
    /// context's live one, unless the partition already ran in it. `units` is the number of
    /// units of the split scan (every index in `assignment` is below it).
    pub(super) fn join(
        &self,
        context: &Arc<TaskContext>,
        assignment: &[Vec<usize>],
        units: usize,
        partition: usize,
    ) -> Arc<Round> {
        let mut live = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        // Rounds that ended are dropped; a held `Weak` keeps its context's allocation, so a
        // live entry's pointer is never that of another context.
        live.retain(|(_, round)| round.strong_count() > 0);
        let entry = live.iter().position(|(c, _)| std::ptr::eq(c.as_ptr(), Arc::as_ptr(context)));
        if let Some(round) = entry.and_then(|at| live[at].1.upgrade())
            && round.started.get(partition).is_some_and(|s| !s.swap(true, Ordering::AcqRel))
        {
            round.running[partition].store(true, Ordering::Release);
            return round;
        }
        let round = Arc::new(Round::new(assignment, units));
        if let Some(started) = round.started.get(partition) {
            started.store(true, Ordering::Release);
            round.running[partition].store(true, Ordering::Release);
        }
        let joined = (Arc::downgrade(context), Arc::downgrade(&round));
        match entry {
            Some(at) => live[at] = joined,
            None => live.push(joined),
        }
        round
    }
}

/// One partition reading in a round; ends the partition there when dropped.
#[derive(Debug)]
pub(super) struct Reading {
    round: Arc<Round>,
    partition: usize,
}

impl Reading {
    pub(super) fn new(round: Arc<Round>, partition: usize) -> Reading {
        Reading { round, partition }
    }

    /// The partition's next unit (see [`Round::next`]).
    pub(super) fn next(&self) -> Option<usize> {
        self.round.next(self.partition)
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        self.round.end(self.partition);
    }
}

/// One execution of a scan's partitions and the units they claimed.
#[derive(Debug)]
pub(super) struct Round {
    /// Each partition's own units, in store order.
    lists: Vec<Vec<usize>>,
    /// Per unit: claimed by a partition.
    taken: Vec<AtomicBool>,
    /// Per partition: the next position of its own list it reads (from the front).
    front: Vec<AtomicUsize>,
    /// Per partition: the positions of its list below this are left to take (from the back).
    back: Vec<AtomicUsize>,
    /// Per partition: executed in this round.
    started: Vec<AtomicBool>,
    /// Per partition: executing now (its units may be taken).
    running: Vec<AtomicBool>,
}

impl Round {
    fn new(assignment: &[Vec<usize>], units: usize) -> Round {
        let partitions = assignment.len();
        Round {
            lists: assignment.to_vec(),
            taken: (0..units).map(|_| AtomicBool::new(false)).collect(),
            front: (0..partitions).map(|_| AtomicUsize::new(0)).collect(),
            back: assignment.iter().map(|l| AtomicUsize::new(l.len())).collect(),
            started: (0..partitions).map(|_| AtomicBool::new(false)).collect(),
            running: (0..partitions).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// Claims `unit` for the caller; `false` if another partition has it.
    fn claim(&self, unit: usize) -> bool {
        self.taken.get(unit).is_some_and(|t| !t.swap(true, Ordering::AcqRel))
    }

    /// The next unit for `partition`: its own next, else one taken from the back of the
    /// running partition with the most units left; `None` when there is none.
    pub(super) fn next(&self, partition: usize) -> Option<usize> {
        if let (Some(list), Some(front)) = (self.lists.get(partition), self.front.get(partition)) {
            loop {
                let at = front.fetch_add(1, Ordering::AcqRel);
                match list.get(at) {
                    Some(&unit) if self.claim(unit) => return Some(unit),
                    Some(_) => continue,
                    None => break,
                }
            }
        }
        loop {
            let left =
                |q: usize| self.back[q].load(Ordering::Acquire).saturating_sub(self.front[q].load(Ordering::Acquire));
            let victim = (0..self.lists.len())
                .filter(|&q| q != partition && self.running[q].load(Ordering::Acquire))
                .filter(|&q| left(q) > 0)
                .max_by_key(|&q| left(q))?;
            if let Some(unit) = self.take_back(victim) {
                return Some(unit);
            }
        }
    }

    /// Takes the last unclaimed unit of `victim`'s list (`None`: none is left).
    fn take_back(&self, victim: usize) -> Option<usize> {
        let back = &self.back[victim];
        let list = &self.lists[victim];
        let mut at = back.load(Ordering::Acquire);
        while at > self.front[victim].load(Ordering::Acquire) {
            match back.compare_exchange(at, at - 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    if let Some(&unit) = list.get(at - 1)
                        && self.claim(unit)
                    {
                        return Some(unit);
                    }
                    at -= 1;
                }
                Err(now) => at = now,
            }
        }
        // The back met the owner's front: what is left is the owner's.
        None
    }

    /// `partition` stops reading (its stream ended or was dropped): no unit of it is taken from
    /// now on.
    pub(super) fn end(&self, partition: usize) {
        if let Some(running) = self.running.get(partition) {
            running.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn context() -> Arc<TaskContext> {
        Arc::new(TaskContext::default())
    }

    fn drain(round: &Round, partition: usize) -> Vec<usize> {
        std::iter::from_fn(|| round.next(partition)).collect()
    }

    /// Partitions on threads, each pausing at random between units, read every unit once.
    #[test]
    fn running_partitions_read_every_unit_once() {
        for case in 0..40usize {
            let partitions = 2 + case % 5;
            let units = 1 + (case * 37) % 120;
            let mut assignment = vec![Vec::new(); partitions];
            for u in 0..units {
                // Uneven lists: partition 0 gets about half.
                assignment[if u % 2 == 0 { 0 } else { u % partitions }].push(u);
            }
            let (rounds, ctx) = (Rounds::default(), context());
            let read: Vec<Vec<usize>> = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..partitions)
                    .map(|p| {
                        let round = rounds.join(&ctx, &assignment, units, p);
                        scope.spawn(move || {
                            let mut got = Vec::new();
                            let mut state = (case * 31 + p) as u64 + 1;
                            while let Some(u) = round.next(p) {
                                got.push(u);
                                state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                                if (state >> 60) == 0 {
                                    std::thread::sleep(std::time::Duration::from_micros(200));
                                }
                            }
                            round.end(p);
                            got
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let mut all: Vec<usize> = read.iter().flatten().copied().collect();
            all.sort_unstable();
            assert_eq!(all, (0..units).collect::<Vec<_>>(), "case {case}: {read:?}");
        }
    }

    /// Units move only from a running partition; a partition re-executed in a live round reads
    /// its own units again, in a new round.
    #[test]
    fn units_move_only_from_running_partitions() {
        let assignment = vec![vec![0, 2, 4], vec![1, 3, 5, 6, 7]];
        let (rounds, ctx) = (Rounds::default(), context());
        // Only partition 0 runs: it reads its own units and takes none of partition 1's.
        let first = rounds.join(&ctx, &assignment, 8, 0);
        assert_eq!(drain(&first, 0), vec![0, 2, 4]);
        first.end(0);
        // Partition 1 joins the same round and finds its units untouched.
        let second = rounds.join(&ctx, &assignment, 8, 1);
        assert!(Arc::ptr_eq(&first, &second));
        assert_eq!(second.next(1), Some(1));
        // Partition 0 again: a new round, its own units again; then it takes partition 1's
        // from the back while partition 1 runs in that round.
        let third = rounds.join(&ctx, &assignment, 8, 0);
        assert!(!Arc::ptr_eq(&first, &third));
        let fourth = rounds.join(&ctx, &assignment, 8, 1);
        assert!(Arc::ptr_eq(&third, &fourth));
        assert_eq!(third.next(1), Some(1));
        assert_eq!(drain(&third, 0), vec![0, 2, 4, 7, 6, 5, 3]);
        assert_eq!(third.next(1), None);
        // An ended partition's units stay: partition 1 ends with units left.
        let fifth = rounds.join(&ctx, &assignment, 8, 0);
        let sixth = rounds.join(&ctx, &assignment, 8, 1);
        assert!(Arc::ptr_eq(&fifth, &sixth));
        assert_eq!(sixth.next(1), Some(1));
        sixth.end(1);
        assert_eq!(drain(&fifth, 0), vec![0, 2, 4]);
        // A partition whose reading is dropped unused (its task never ran) ends too.
        let seventh = rounds.join(&ctx, &assignment, 8, 0);
        drop(Reading::new(rounds.join(&ctx, &assignment, 8, 1), 1));
        assert_eq!(drain(&seventh, 0), vec![0, 2, 4]);
    }

    /// Two executions under different task contexts that overlap in time each read every unit
    /// once; neither takes the other's units.
    #[test]
    fn overlapping_executions_keep_their_own_rounds() {
        let assignment = vec![vec![0, 2, 4], vec![1, 3, 5]];
        let (rounds, a, b) = (Rounds::default(), context(), context());
        let a0 = rounds.join(&a, &assignment, 6, 0);
        let b0 = rounds.join(&b, &assignment, 6, 0);
        assert!(!Arc::ptr_eq(&a0, &b0));
        let a1 = rounds.join(&a, &assignment, 6, 1);
        let b1 = rounds.join(&b, &assignment, 6, 1);
        assert!(Arc::ptr_eq(&a0, &a1) && Arc::ptr_eq(&b0, &b1));
        // Execution a's partition 0 drains its units and partition 1's; b's are untouched.
        assert_eq!(drain(&a0, 0), vec![0, 2, 4, 5, 3, 1]);
        assert_eq!(drain(&b1, 1), vec![1, 3, 5, 4, 2, 0]);
        assert_eq!(a1.next(1), None);
        assert_eq!(b0.next(0), None);
        // A partition executed under a context of its own reads its own units only.
        let c = context();
        let alone = rounds.join(&c, &assignment, 6, 1);
        assert_eq!(drain(&alone, 1), vec![1, 3, 5]);
    }
}
