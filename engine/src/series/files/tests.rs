//! Tests of the catalog's files: saving, loading, increments, snapshots and retired ids.
#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use crate::model::{Name, SeriesId};
use crate::series::SeriesFilter;
use roaring::RoaringBitmap;

fn key(metric: &str, host: &str, gpu: &str) -> SeriesKey {
    SeriesKey::new(metric, [("host", host), ("gpu", gpu)])
}

/// Saves what `files.pending` says (as `Store::commit` does); returns the plan.
fn save(c: &SeriesCatalog, files: &mut CatalogFiles, dir: &Path) -> CatalogSave {
    let plan = files.plan(c);
    if let Some(pending) = files.pending(c) {
        files.save(&crate::storage::OsStorage, dir, &pending).unwrap();
    }
    plan
}

/// The save of the live series `keys` (none retired) as ids `from..`.
pub(crate) fn some(from: usize, keys: &[Option<Arc<SeriesKey>>]) -> PendingSave {
    let keys: Vec<Arc<SeriesKey>> = keys.iter().flatten().cloned().collect();
    PendingSave { from, end: from + keys.len(), keys, retired: Vec::new() }
}

/// Adds the series `m{host="h<i>", gpu="0"}` for each `i` of `hosts`.
fn grow(c: &mut SeriesCatalog, hosts: std::ops::Range<usize>) {
    for i in hosts {
        c.get_or_insert(&key("m", &format!("h{i}"), "0")).unwrap();
    }
}

fn load(dir: &Path) -> Result<(SeriesCatalog, CatalogFiles)> {
    SeriesCatalog::load_dir(&crate::storage::OsStorage, dir)
}

fn increment_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join(CATALOG_DIR))
        .map(|d| d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// Names that JSON must escape (quotes, backslashes, newlines, tabs, non-ASCII) come back
/// exactly from a snapshot and an increment, and a loaded catalog shares each name across
/// both files: the increment's series take the snapshot's names.
#[test]
fn escaped_names_round_trip_and_are_shared_across_files() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, mut files) = load(dir.path()).unwrap();
    let odd = ["a \"quoted\" value", "back\\slash", "two\nlines\tand tab", "café 日本", "\u{1F600}"];
    // Enough series before that the five new ones are an increment, not a new snapshot.
    grow(&mut c, 0..100);
    for (i, v) in odd.iter().enumerate() {
        c.get_or_insert(&SeriesKey::new("ünits", [("host", "nöde-1"), ("note", *v), ("i", &*i.to_string())])).unwrap();
    }
    assert_eq!(save(&c, &mut files, dir.path()), CatalogSave::Snapshot);
    for v in odd {
        c.get_or_insert(&SeriesKey::new("ünits", [("host", "nöde-2"), ("note", v)])).unwrap();
    }
    assert_eq!(save(&c, &mut files, dir.path()), CatalogSave::Increment(105));
    let (d, _) = load(dir.path()).unwrap();
    assert_eq!(d.keys(), c.keys());
    for (i, v) in odd.iter().enumerate() {
        let (a, b) = (d.key(100 + i as SeriesId).unwrap(), d.key(105 + i as SeriesId).unwrap());
        assert_eq!(a.labels.get("note").unwrap(), v);
        assert!(Name::ptr_eq(&a.metric, &b.metric), "the metric name, across files");
        assert!(Name::ptr_eq(a.labels.get("note").unwrap(), b.labels.get("note").unwrap()), "{v}, across files");
    }
    assert!(Name::ptr_eq(&d.key(100).unwrap().metric, &d.key(104).unwrap().metric), "within the snapshot");
}

/// A growing catalog is saved as increments of the new series, a new snapshot now and
/// then (when the increments reach half the snapshot, or `MAX_INCREMENTS` files), and
/// every load in between sees every saved series under its id.
#[test]
fn a_growing_catalog_is_saved_in_increments_and_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, mut files) = load(dir.path()).unwrap();
    assert!(c.is_empty());
    let mut plans = Vec::new();
    let mut n = 0;
    // 100 series, then one at a time (a trickle), then a burst of 1000.
    for batch in std::iter::once(100).chain(std::iter::repeat_n(1, 80)).chain([1000]) {
        for _ in 0..batch {
            c.get_or_insert(&key("m", &format!("h{n}"), "0")).unwrap();
            n += 1;
        }
        plans.push(save(&c, &mut files, dir.path()));
        assert_eq!(save(&c, &mut files, dir.path()), CatalogSave::Nothing, "nothing new, nothing written");
        let (d, loaded) = load(dir.path()).unwrap();
        assert_eq!(d.keys(), c.keys(), "after {} saves", plans.len());
        assert_eq!(loaded.saved(), c.len());
        assert_eq!(loaded.increments(), files.increments());
        assert_eq!(increment_files(dir.path()).len(), files.increments());
        assert!(files.increments() < MAX_INCREMENTS);
    }
    assert_eq!(plans[0], CatalogSave::Snapshot, "the first save of a store is a snapshot");
    assert_eq!(plans[1], CatalogSave::Increment(100));
    assert_eq!(plans[2], CatalogSave::Increment(101));
    let snapshots = plans.iter().filter(|p| **p == CatalogSave::Snapshot).count();
    let increments = plans.iter().filter(|p| matches!(p, CatalogSave::Increment(_))).count();
    // One series of ~50 bytes against a 5 kB snapshot: dozens of increments per snapshot.
    assert!(increments >= 60 && (2..=4).contains(&snapshots), "{snapshots} snapshots, {increments} increments");
    assert_eq!(*plans.last().unwrap(), CatalogSave::Snapshot, "a burst larger than half the snapshot");
    let (d, _) = load(dir.path()).unwrap();
    assert_eq!(d.get(&key("m", "h1100", "0")), Some(1100));
    let f = SeriesFilter { metrics: None, labels: vec![("host".into(), vec![Some("h150".into())])] };
    assert_eq!(d.select(&f).iter().collect::<Vec<_>>(), vec![150], "postings rebuilt on load");
}

/// Increments the snapshot covers (a writer stopped before deleting them) are skipped and
/// removed by `remove_stale`; one that overlaps it contributes its new series only; a
/// missing increment, a changed byte, an unsealed or misnamed increment are corruption.
#[test]
fn increments_left_behind_overlapping_missing_or_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (mut c, mut files) = load(d).unwrap();
    grow(&mut c, 0..200);
    save(&c, &mut files, d);
    for i in 200..205 {
        c.get_or_insert(&key("m", &format!("h{i}"), "0")).unwrap();
        save(&c, &mut files, d);
    }
    assert_eq!(increment_files(d).len(), 5);
    let inc = |name: &str| d.join(CATALOG_DIR).join(name);
    // A snapshot of the first 202 series, as if a writer wrote it and stopped: the first
    // two increments are stale, the others still needed.
    let mut partial = CatalogFiles::default();
    partial.save(&crate::storage::OsStorage, d, &some(0, &c.keys()[..202])).unwrap();
    let (again, mut loaded) = load(d).unwrap();
    assert_eq!(again.keys(), c.keys());
    assert_eq!(loaded.increments(), 3);
    loaded.remove_stale(&crate::storage::OsStorage);
    assert_eq!(
        increment_files(d),
        ["000000000202-000000000203.json", "000000000203-000000000204.json", "000000000204-000000000205.json"]
    );
    // An increment overlapping the snapshot: 201..204 over a snapshot of 202.
    let mut merged = CatalogFiles { saved: 201, base_len: 200, base_current: true, ..Default::default() };
    merged.save(&crate::storage::OsStorage, d, &some(201, &c.keys()[201..204])).unwrap();
    let (again, _) = load(d).unwrap();
    assert_eq!(again.keys(), c.keys(), "the overlap is read once");
    std::fs::remove_file(inc("000000000201-000000000204.json")).unwrap();

    let text = std::fs::read_to_string(inc("000000000203-000000000204.json")).unwrap();
    std::fs::write(inc("000000000203-000000000204.json"), text.replacen("h203", "h2O3", 1)).unwrap();
    let e = load(d).unwrap_err();
    assert!(matches!(e, Error::CatalogCorrupt { .. }) && e.to_string().contains("checksum mismatch"), "{e}");
    std::fs::write(inc("000000000203-000000000204.json"), text.replacen(r#","crc32":"#, r#","x":"#, 1)).unwrap();
    let e = load(d).unwrap_err();
    assert!(e.to_string().contains("must be sealed"), "{e}");
    std::fs::rename(inc("000000000202-000000000203.json"), inc("000000000202-000000000204.json")).unwrap();
    std::fs::write(inc("000000000203-000000000204.json"), &text).unwrap();
    let e = load(d).unwrap_err();
    assert!(e.to_string().contains("1 series in the file, 2 in its name"), "{e}");
    std::fs::remove_file(inc("000000000202-000000000204.json")).unwrap();
    let e = load(d).unwrap_err();
    assert!(e.to_string().contains("the increment before it is missing"), "{e}");
    // A temporary file of an interrupted write is not an increment; a writer's open removes it.
    std::fs::write(inc("000000000202-000000000203.tmp"), b"{").unwrap();
    assert!(load(d).unwrap_err().to_string().contains("missing"));
    for name in increment_files(d) {
        std::fs::remove_file(inc(&name)).unwrap();
    }
    std::fs::write(inc("000000000202-000000000203.tmp"), b"{").unwrap();
    let (again, mut loaded) = load(d).unwrap();
    assert_eq!(again.len(), 202);
    loaded.remove_stale(&crate::storage::OsStorage);
    assert!(increment_files(d).is_empty());
}

/// A reader beside a writer that writes a new snapshot and deletes the increments: between
/// the reader's listing and its read of the snapshot, the reader gets every series (the
/// listed increments are in the new snapshot); after its read of the old snapshot, reading
/// an increment is `NotFound` (a read-only open starts over on it), never a catalog
/// missing series.
#[test]
fn a_reader_beside_a_writer_replacing_the_increments() {
    for after_list in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_path_buf();
        let (mut c, mut files) = load(&d).unwrap();
        grow(&mut c, 0..100);
        save(&c, &mut files, &d);
        for i in 100..103 {
            c.get_or_insert(&key("m", &format!("h{i}"), "0")).unwrap();
            assert!(matches!(save(&c, &mut files, &d), CatalogSave::Increment(_)));
        }
        // The writer: one more series, saved as a new snapshot, the increments deleted.
        c.get_or_insert(&key("m", "h103", "0")).unwrap();
        let writer = {
            let (c, d) = (c.clone(), d.clone());
            crate::storage::hooked::once(move || {
                let (_, mut files) = load(&d).unwrap();
                files.save(&crate::storage::OsStorage, &d, &some(0, c.keys())).unwrap();
                assert!(increment_files(&d).is_empty());
            })
        };
        // The writer acts right after the reader listed `series/`, or right after it read
        // the snapshot.
        use crate::storage::hooked::{Event, Hooked};
        let storage = Hooked::new(move |event, path| match event {
            Event::AfterList if after_list && path.ends_with(CATALOG_DIR) => writer(),
            Event::AfterRead if !after_list && path.ends_with(CATALOG_FILE) => writer(),
            _ => {}
        });
        match SeriesCatalog::load_dir(&storage, &d) {
            Ok((read, _)) => {
                assert!(after_list, "the old snapshot and deleted increments cannot load");
                assert_eq!(read.keys(), c.keys(), "the new snapshot, the listed increments skipped");
            }
            Err(e) => {
                assert!(!after_list, "{e}");
                assert_eq!(e.kind(), crate::error::ErrorKind::NotFound, "{e}");
            }
        }
    }
}

/// An increment that overlaps the snapshot with different series, and a version 2 snapshot
/// without its seal, are corruption.
#[test]
fn a_divergent_overlap_or_an_unsealed_snapshot_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (mut c, mut files) = load(d).unwrap();
    grow(&mut c, 0..50);
    save(&c, &mut files, d);
    // Series 48..51 where the snapshot has 48 and 49 as other series.
    let other: Vec<Option<Arc<SeriesKey>>> =
        ["x48", "x49", "h50"].iter().map(|h| Some(Arc::new(key("m", h, "0")))).collect();
    let mut overlapping = CatalogFiles { saved: 48, base_len: 48, base_current: true, ..Default::default() };
    overlapping.save(&crate::storage::OsStorage, d, &some(48, &other)).unwrap();
    let e = load(d).unwrap_err();
    assert!(e.to_string().contains(r#"series 48 is m{gpu="0",host="x48"} here"#), "{e}");
    std::fs::remove_file(d.join(CATALOG_DIR).join("000000000048-000000000051.json")).unwrap();
    let text = std::fs::read_to_string(d.join(CATALOG_FILE)).unwrap();
    let unsealed = format!("{}}}", &text[..text.rfind(r#","crc32":"#).unwrap()]);
    std::fs::write(d.join(CATALOG_FILE), unsealed).unwrap();
    let e = load(d).unwrap_err();
    assert!(e.to_string().contains("must be sealed"), "{e}");
}

/// A retrying reader's second load: with the snapshot unchanged only the increments after
/// what it had are read, and the result is what a full load gives; after a new snapshot it
/// is a full load.
#[test]
fn a_second_load_reads_only_what_is_new() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (mut c, mut files) = load(d).unwrap();
    grow(&mut c, 0..100);
    save(&c, &mut files, d);
    c.get_or_insert(&key("m", "h100", "0")).unwrap();
    save(&c, &mut files, d);
    let first = load(d).unwrap();
    assert_eq!(first.0.len(), 101);
    for i in 101..104 {
        c.get_or_insert(&key("m", &format!("h{i}"), "0")).unwrap();
        save(&c, &mut files, d);
    }
    let faulty = crate::storage::FaultyStorage::new(Arc::new(crate::storage::OsStorage), u64::MAX);
    faulty.record_reads();
    let (again, _) = SeriesCatalog::load_dir_after(&faulty, d, first).unwrap();
    assert_eq!(again.keys(), c.keys());
    let reads = faulty.reads();
    let name = |r: &crate::storage::ReadRecord| r.path.file_name().unwrap().to_string_lossy().into_owned();
    let increments = reads.iter().filter(|r| name(r) != CATALOG_FILE).count();
    assert_eq!(increments, 3, "{reads:?}");
    // Of the snapshot only its checksum, to tell that it is the one read before.
    let snapshot: Vec<u64> =
        reads.iter().filter(|r| name(r) == CATALOG_FILE).map(|r| r.range.end - r.range.start).collect();
    assert_eq!(snapshot, [crate::seal::SEALED_TAIL as u64], "{reads:?}");
    // Another snapshot of the same size (a store replaced meanwhile): its checksum differs,
    // so it is read in full.
    let stash = std::fs::read(d.join(CATALOG_FILE)).unwrap();
    let (cached, cached_files) = load(d).unwrap();
    let mut other = SeriesCatalog::new();
    for k in c.keys().iter().flatten().take(100) {
        let renamed = SeriesKey::new(k.metric.replace('m', "x"), k.labels.iter().map(|(a, b)| (a.clone(), b.clone())));
        other.get_or_insert(&renamed).unwrap();
    }
    CatalogFiles::default().save(&crate::storage::OsStorage, d, &some(0, other.keys())).unwrap();
    assert_eq!(std::fs::metadata(d.join(CATALOG_FILE)).unwrap().len(), stash.len() as u64, "same size");
    let (again, _) = SeriesCatalog::load_dir_after(&crate::storage::OsStorage, d, (cached, cached_files)).unwrap();
    assert_eq!(again.keys()[..100], other.keys()[..], "the other store's series");
    std::fs::write(d.join(CATALOG_FILE), &stash).unwrap();
    // A new snapshot (more series, so a larger file): a full load.
    let previous = load(d).unwrap();
    grow(&mut c, 104..300);
    assert_eq!(save(&c, &mut files, d), CatalogSave::Snapshot);
    let (again, _) = SeriesCatalog::load_dir_after(&crate::storage::OsStorage, d, previous).unwrap();
    assert_eq!(again.keys(), c.keys());
}

/// A version-1 snapshot (written before increments) loads; the first save rewrites it as
/// version 2, which binaries that do not know increments refuse.
#[test]
fn a_version_1_snapshot_is_rewritten_before_any_increment() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(CATALOG_FILE);
    std::fs::write(&path, br#"{"version":1,"series":[{"metric":"m","labels":{"host":"a"}}]}"#).unwrap();
    let (mut c, mut files) = load(dir.path()).unwrap();
    assert_eq!(c.len(), 1);
    c.get_or_insert(&key("m", "b", "0")).unwrap();
    assert_eq!(save(&c, &mut files, dir.path()), CatalogSave::Snapshot);
    assert!(std::fs::read_to_string(&path).unwrap().starts_with(r#"{"version":2,"#));
    c.get_or_insert(&key("m", "c", "0")).unwrap();
    assert_eq!(save(&c, &mut files, dir.path()), CatalogSave::Increment(2));
    assert_eq!(load(dir.path()).unwrap().0.keys(), c.keys());
}

/// A catalog that never retired a series is written as version 2, as before (older
/// binaries read it); one with retired ids as version 3 with their ranges, which loads back
/// with the same ids, lookups and postings, and continues in version 2 increments.
#[test]
fn retired_ids_make_a_version_3_snapshot_that_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (mut c, mut files) = load(d).unwrap();
    grow(&mut c, 0..100);
    assert_eq!(save(&c, &mut files, d), CatalogSave::Snapshot);
    let v2 = std::fs::read_to_string(d.join(CATALOG_FILE)).unwrap();
    assert!(v2.starts_with(r#"{"version":2,"series":[{"metric":"m","labels":{"#), "{}", &v2[..60]);
    assert!(!v2.contains("retired"));
    // Retire 0..10, 20, 21 and 99: the next save is a snapshot even with no new series.
    let mut dead = RoaringBitmap::new();
    dead.insert_range(0..10);
    dead.extend([20, 21, 99]);
    assert_eq!(c.retire(&dead), 13);
    assert_eq!(save(&c, &mut files, d), CatalogSave::Snapshot);
    assert_eq!(save(&c, &mut files, d), CatalogSave::Nothing);
    let v3 = std::fs::read_to_string(d.join(CATALOG_FILE)).unwrap();
    assert!(v3.starts_with(r#"{"version":3,"series":[{"metric":"m","labels":{"#), "{}", &v3[..60]);
    assert!(v3.contains(r#""retired":[[0,10],[20,22],[99,100]],"crc32":"#), "{}", &v3[v3.len() - 80..]);
    assert!(v3.len() < v2.len(), "the retired series' keys are not written");
    // New series after it go to a (version 2) increment.
    grow(&mut c, 100..103);
    assert_eq!(save(&c, &mut files, d), CatalogSave::Increment(100));
    let (back, mut back_files) = load(d).unwrap();
    assert_eq!(back.keys(), c.keys());
    assert_eq!((back.len(), back.live_len()), (103, 90));
    assert_eq!(back.retired(), c.retired());
    assert_eq!(back.get(&key("m", "h5", "0")), None);
    assert_eq!(back.get(&key("m", "h50", "0")), Some(50));
    assert_eq!(back.get(&key("m", "h101", "0")), Some(101));
    let f = SeriesFilter { metrics: Some(vec!["m".into()]), labels: vec![] };
    assert_eq!(back.select(&f), c.select(&f));
    assert_eq!(back_files.plan(&back), CatalogSave::Nothing, "the files hold every retirement");
    // A series written again after its retirement is a new one, also after a reload.
    let mut back = back;
    assert_eq!(back.get_or_insert(&key("m", "h5", "0")).unwrap(), (103, true));
    save(&back, &mut back_files, d);
    assert_eq!(load(d).unwrap().0.get(&key("m", "h5", "0")), Some(103));
}

/// A version 3 snapshot whose `retired` ranges are out of order, overlapping, empty or past
/// its ids, a version 3 without them and a version 2 with them are refused, saying why.
#[test]
fn corrupt_retired_ranges_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let series = r#"[{"metric":"m","labels":{"host":"a"}},{"metric":"m","labels":{"host":"b"}}]"#;
    for (version, retired, want) in [
        (3, Some("[[3,4],[0,1]]"), "retired range [0, 1) is not after the one before it (ending at 4)"),
        (3, Some("[[0,2],[1,3]]"), "retired range [1, 3) is not after the one before it (ending at 2)"),
        (3, Some("[[1,1]]"), "retired range [1, 1) is empty or reversed"),
        (3, Some("[[2,1]]"), "retired range [2, 1) is empty or reversed"),
        (3, Some("[[3,5]]"), "retired range [3, 5) ends past the 4 ids of the snapshot"),
        (3, Some("[[0,1,2]]"), "trailing characters"),
        (3, None, "a version 3 snapshot must have `retired`"),
        (2, Some("[[0,1]]"), "a version 2 snapshot must not have `retired`"),
    ] {
        let retired = retired.map(|r| format!(r#","retired":{r}"#)).unwrap_or_default();
        let text = format!(r#"{{"version":{version},"series":{series}{retired}}}"#);
        std::fs::write(d.join(CATALOG_FILE), crate::seal::seal(text.into_bytes())).unwrap();
        let e = load(d).unwrap_err();
        assert!(matches!(e, Error::CatalogCorrupt { .. }) && e.to_string().contains(want), "{want}: {e}");
    }
    // And a sound one loads: ids 0 and 3 live, 1..3 retired.
    let text = format!(r#"{{"version":3,"series":{series},"retired":[[1,3]]}}"#);
    std::fs::write(d.join(CATALOG_FILE), crate::seal::seal(text.clone().into_bytes())).unwrap();
    let (c, _) = load(d).unwrap();
    assert_eq!((c.len(), c.live_len()), (4, 2));
    assert_eq!(c.get(&SeriesKey::new("m", [("host", "b")])), Some(3));
    // Unsealed, it is refused like a version 2 one.
    std::fs::write(d.join(CATALOG_FILE), text).unwrap();
    assert!(load(d).unwrap_err().to_string().contains("a version 3 snapshot must be sealed"));
}

#[test]
fn save_load_round_trip_and_garbage() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("series.json");
    let mut c = SeriesCatalog::new();
    grow(&mut c, 0..100);
    save(&c, &mut CatalogFiles::default(), dir.path());
    let d = load(dir.path()).unwrap().0;
    assert_eq!(d.keys().len(), 100);
    assert_eq!(d.get(&key("m", "h42", "0")), Some(42));
    assert_eq!(d.label_keys(), vec!["host", "gpu"]);
    let f = SeriesFilter { metrics: None, labels: vec![("host".into(), vec![Some("h7".into())])] };
    assert_eq!(d.select(&f).iter().collect::<Vec<_>>(), vec![7], "postings rebuilt on load");
    let dup = r#"{"version":1,"series":[{"metric":"m","labels":{"host":"a"}},{"metric":"m","labels":{"host":"a"}}]}"#;
    std::fs::write(&path, dup).unwrap();
    let e = load(dir.path()).unwrap_err();
    assert!(e.to_string().contains("duplicate series"), "{e}");
    std::fs::write(&path, br#"{"version":1,"series":[{"metric":"m","labels":{"gpu":"0"}}]}"#).unwrap();
    let e = load(dir.path()).unwrap_err();
    assert!(matches!(e, Error::CatalogCorrupt { .. }), "a series without host: {e}");
    std::fs::write(&path, b"{not json").unwrap();
    let e = load(dir.path()).unwrap_err();
    assert!(matches!(e, Error::CatalogCorrupt { .. }), "{e}");
}

/// The saved catalog is sealed (`crate::seal`): a label value changed on disk, which
/// still parses as another valid series, is `CatalogCorrupt`, not a renamed series.
#[test]
fn a_changed_label_on_disk_is_corruption_not_a_renamed_series() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("series.json");
    let mut c = SeriesCatalog::new();
    for i in 0..20 {
        c.get_or_insert(&key("m", &format!("node-{i:02}"), "0")).unwrap();
    }
    save(&c, &mut CatalogFiles::default(), dir.path());
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replacen("node-13", "node-1;", 1)).unwrap();
    let e = load(dir.path()).unwrap_err();
    assert!(matches!(e, Error::CatalogCorrupt { .. }) && e.to_string().contains("checksum mismatch"), "{e}");
    std::fs::write(&path, &text).unwrap();
    assert_eq!(load(dir.path()).unwrap().0.len(), 20);
}
