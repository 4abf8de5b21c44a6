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
}

/// Parses a catalog file. Unknown fields are ignored (as `serde(derive)` would); a missing
/// `version` or `series` is an error.
pub(super) fn parse(bytes: &[u8]) -> serde_json::Result<Snapshot> {
    let mut interner = Interner::default();
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let snapshot = de.deserialize_map(SnapshotSeed(&mut interner))?;
    de.end()?;
    Ok(snapshot)
}

/// Each distinct name once.
#[derive(Default)]
struct Interner(HashSet<Name, foldhash::fast::RandomState>);

impl Interner {
    fn intern(&mut self, s: &str) -> Name {
        if let Some(name) = self.0.get(s) {
            return name.clone();
        }
        let name = Name::from(s);
        self.0.insert(name.clone());
        name
    }
}

struct SnapshotSeed<'i>(&'i mut Interner);

impl<'de> Visitor<'de> for SnapshotSeed<'_> {
    type Value = Snapshot;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a series catalog (an object with `version` and `series`)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Snapshot, A::Error> {
        let (mut version, mut first, mut series) = (None, None, None);
        while let Some(Text(field)) = map.next_key::<Text<'de>>()? {
            match field.as_ref() {
                "version" => version = Some(map.next_value::<u32>()?),
                "first" => first = map.next_value::<Option<usize>>()?,
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
                "metric" => metric = Some(self.0.intern(&map.next_value::<Text<'de>>()?.0)),
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
        let interner = self.0;
        let mut intern = |s: &str| interner.intern(s);
        deserializer.deserialize_map(LabelsVisitor(Some(&mut intern)))
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
        assert_eq!(s.series[2].metric, "café");
        assert!(Name::ptr_eq(&s.series[0].metric, &s.series[1].metric));
        let hosts: Vec<&Name> = s.series[..2].iter().map(|k| k.labels.get("host").unwrap()).collect();
        assert!(Name::ptr_eq(hosts[0], hosts[1]), "an escaped and a plain n1 are one name");
        for bad in [
            r#"{"series":[]}"#,
            r#"{"version":2}"#,
            r#"{"version":2,"series":[{"metric":"m"}]}"#,
            r#"{"version":2,"series":[{"metric":1,"labels":{}}]}"#,
            r#"{"version":2,"series":[{"metric":"m","labels":{"a":1}}]}"#,
            r#"{"version":2,"series":[]} x"#,
            r#"{"version":2,"series":[{"metric":"m","labels":{"a":"b"}"#,
        ] {
            assert!(parse(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
