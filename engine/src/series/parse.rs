//! Reading a catalog file (`series.json` or an increment) with its names interned: the names
//! are read borrowed from the file and each distinct one is allocated once, so a million-series
//! snapshot of a few thousand distinct names costs a few thousand string allocations, not five
//! million (see [`Name`]).

use std::collections::HashSet;
use std::fmt;

use serde::Deserializer as _;
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::model::{LabelsVisitor, Name, SeriesKey, Text};

/// A catalog file: the snapshot (no `first`) or an increment (its first series id).
pub(super) struct Snapshot {
    pub(super) version: u32,
    pub(super) first: Option<usize>,
    pub(super) series: Vec<SeriesKey>,
    /// A version 3 snapshot's retired ids: half-open ranges, as written (checked by the loader).
    pub(super) retired: Option<Vec<(u64, u64)>>,
}

/// Parses a catalog file as `serde(derive)` would: unknown fields are ignored (the seal's
/// `crc32`), a missing or repeated `version` or `series` (`metric`, `labels` in a series) is an
/// error, `first` may be absent or null, `retired` (a list of `[start, end]` pairs, read by
/// serde as it is: a few numbers) absent; in `labels` the last value of a repeated key wins.
/// Unlike the derived parse, a struct written as a JSON array (`[2, null, [...]]`) is refused:
/// no writer of catalog files writes that.
pub(super) fn parse(bytes: &[u8]) -> serde_json::Result<Snapshot> {
    let mut interner = Interner::default();
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let snapshot = de.deserialize_map(SnapshotSeed(&mut interner))?;
    de.end()?;
    Ok(snapshot)
}

/// Each distinct name once, and the labels of the series being read.
#[derive(Default)]
struct Interner {
    names: HashSet<Name, foldhash::fast::RandomState>,
    scratch: Vec<(Name, Name)>,
}

fn intern(names: &mut HashSet<Name, foldhash::fast::RandomState>, s: &str) -> Name {
    if let Some(name) = names.get(s) {
        return name.clone();
    }
    let name = Name::from(s);
    names.insert(name.clone());
    name
}

fn duplicate<E: serde::de::Error>(field: &'static str) -> E {
    E::duplicate_field(field)
}

struct SnapshotSeed<'i>(&'i mut Interner);

impl<'de> Visitor<'de> for SnapshotSeed<'_> {
    type Value = Snapshot;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a series catalog (an object with `version` and `series`)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Snapshot, A::Error> {
        let (mut version, mut first, mut series, mut retired) = (None, None, None, None);
        let mut seen_first = false;
        while let Some(Text(field)) = map.next_key::<Text<'de>>()? {
            match field.as_ref() {
                "version" if version.is_some() => return Err(duplicate("version")),
                "first" if seen_first => return Err(duplicate("first")),
                "series" if series.is_some() => return Err(duplicate("series")),
                "retired" if retired.is_some() => return Err(duplicate("retired")),
                "retired" => retired = Some(map.next_value::<Vec<(u64, u64)>>()?),
                "version" => version = Some(map.next_value::<u32>()?),
                "first" => {
                    seen_first = true;
                    first = map.next_value::<Option<usize>>()?;
                }
                "series" => series = Some(map.next_value_seed(SeriesSeed(&mut *self.0))?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let missing = |name| <A::Error as serde::de::Error>::missing_field(name);
        Ok(Snapshot {
            version: version.ok_or_else(|| missing("version"))?,
            first,
            series: series.ok_or_else(|| missing("series"))?,
            retired,
        })
    }
}

/// The `series` array.
struct SeriesSeed<'i>(&'i mut Interner);

impl<'de> DeserializeSeed<'de> for SeriesSeed<'_> {
    type Value = Vec<SeriesKey>;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Vec<SeriesKey>, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for SeriesSeed<'_> {
    type Value = Vec<SeriesKey>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of series")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<SeriesKey>, A::Error> {
        let mut out = Vec::new();
        while let Some(key) = seq.next_element_seed(KeySeed(&mut *self.0))? {
            out.push(key);
        }
        Ok(out)
    }
}

/// One series: `{"metric": ..., "labels": {...}}`.
struct KeySeed<'i>(&'i mut Interner);

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = SeriesKey;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<SeriesKey, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = SeriesKey;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a series (an object with `metric` and `labels`)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SeriesKey, A::Error> {
        let (mut metric, mut labels) = (None, None);
        while let Some(Text(field)) = map.next_key::<Text<'de>>()? {
            match field.as_ref() {
                "metric" if metric.is_some() => return Err(duplicate("metric")),
                "labels" if labels.is_some() => return Err(duplicate("labels")),
                "metric" => metric = Some(intern(&mut self.0.names, &map.next_value::<Text<'de>>()?.0)),
                "labels" => labels = Some(map.next_value_seed(LabelsSeed(&mut *self.0))?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let missing = |name| <A::Error as serde::de::Error>::missing_field(name);
        Ok(SeriesKey {
            metric: metric.ok_or_else(|| missing("metric"))?,
            labels: labels.ok_or_else(|| missing("labels"))?,
        })
    }
}

struct LabelsSeed<'i>(&'i mut Interner);

impl<'de> DeserializeSeed<'de> for LabelsSeed<'_> {
    type Value = crate::model::Labels;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        let Interner { names, scratch } = self.0;
        let mut intern = |s: &str| intern(names, s);
        deserializer.deserialize_map(LabelsVisitor { intern: Some(&mut intern), scratch })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The interned parse reads what serde's derived parse reads (escapes, unsorted and
    /// repeated label keys, unknown fields), shares equal names, and refuses what it refuses.
    #[test]
    fn parses_as_serde_does_and_shares_names() {
        let text = r#"{"version":2,"extra":[1,{"a":2}],"first":7,"series":[
            {"metric":"m","labels":{"host":"n\u0031","gpu":"0"}},
            {"labels":{"gpu":"1","host":"n1","gpu":"2"},"metric":"m","note":null},
            {"metric":"caf\u00e9","labels":{}}]}"#;
        let s = parse(text.as_bytes()).unwrap();
        assert_eq!((s.version, s.first), (2, Some(7)));
        let derived: Vec<SeriesKey> =
            serde_json::from_value(serde_json::from_str::<serde_json::Value>(text).unwrap()["series"].clone()).unwrap();
        assert_eq!(s.series, derived);
        assert_eq!(s.series[1].labels.get("gpu").unwrap(), "2");
        assert!(s.series.iter().all(|k| k.labels.capacity() == k.labels.len()), "labels are kept without spare room");
        assert_eq!(s.series[2].metric, "café");
        assert!(Name::ptr_eq(&s.series[0].metric, &s.series[1].metric));
        let hosts: Vec<&Name> = s.series[..2].iter().map(|k| k.labels.get("host").unwrap()).collect();
        assert!(Name::ptr_eq(hosts[0], hosts[1]), "an escaped and a plain n1 are one name");
        // What the derived parse refuses, this refuses.
        #[derive(serde::Deserialize)]
        #[allow(dead_code)]
        struct Derived {
            version: u32,
            #[serde(default)]
            first: Option<usize>,
            series: Vec<SeriesKey>,
        }
        for bad in [
            r#"{"series":[]}"#,
            r#"{"version":2}"#,
            r#"{"version":2,"series":[{"metric":"m"}]}"#,
            r#"{"version":2,"series":[{"metric":1,"labels":{}}]}"#,
            r#"{"version":2,"series":[{"metric":"m","labels":{"a":1}}]}"#,
            r#"{"version":2,"series":[]} x"#,
            r#"{"version":2,"series":[{"metric":"m","labels":{"a":"b"}"#,
            r#"{"version":2,"version":2,"series":[]}"#,
            r#"{"version":2,"first":1,"first":null,"series":[]}"#,
            r#"{"version":2,"series":[],"series":[]}"#,
            r#"{"version":2,"series":[{"metric":"m","metric":"n","labels":{}}]}"#,
            r#"{"version":2,"series":[{"metric":"m","labels":{},"labels":{}}]}"#,
        ] {
            assert!(serde_json::from_str::<Derived>(bad).is_err(), "derived accepts {bad}");
            assert!(parse(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
