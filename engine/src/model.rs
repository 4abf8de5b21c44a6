//! The data model: series keys, samples and write batches.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{Error, Result};

/// Dense numeric id of a series, assigned by the [`crate::series::SeriesCatalog`].
pub type SeriesId = u32;

/// The label every series must carry: the host whose clock stamped its samples.
pub const HOST_LABEL: &str = "host";

/// Label keys that cannot be used because they collide with `samples` table columns.
pub const RESERVED_LABELS: &[&str] =
    &["time", "local_time", "time_uncertainty", "metric", "value", "series_id", "domain", "entity"];

/// Most labels one series may carry (including `host`). Collectors rarely exceed a dozen;
/// the bound keeps one hostile series definition from costing unbounded catalog memory.
pub const MAX_LABELS: usize = 128;

/// Nanoseconds per second: every timestamp and duration in Lockstep is in ns.
pub const SEC: i64 = 1_000_000_000;
/// Nanoseconds per millisecond.
pub const MILLI: i64 = 1_000_000;
/// Longest metric name, in bytes (OpenTelemetry allows instrument names up to 255 characters).
pub const MAX_METRIC_NAME_BYTES: usize = 256;
/// Longest label key, in bytes.
pub const MAX_LABEL_KEY_BYTES: usize = 128;
/// Longest label value, in bytes.
pub const MAX_LABEL_VALUE_BYTES: usize = 4096;

/// Why `name` cannot be a metric name or label key (`what`), if it cannot: empty, longer than
/// `max` bytes, or holding a control character (NUL, newline, ...), whitespace or one of
/// `{ } = , "` (which would make the printed series `metric{key="value"}` ambiguous).
fn check_name(what: &str, name: &str, max: usize) -> Option<String> {
    if name.is_empty() {
        return Some(format!("{what} is empty"));
    }
    let shown = || {
        let cut = name.char_indices().nth(64).map_or(name.len(), |(i, _)| i);
        format!("{:?}{}", &name[..cut], if cut < name.len() { "..." } else { "" })
    };
    if name.len() > max {
        return Some(format!("{what} {} is {} bytes long (at most {max})", shown(), name.len()));
    }
    // Printable ASCII without the five is the common case, checked a byte at a time (every
    // name of every series of a loaded catalog goes through here).
    let plain = |b: &u8| matches!(b, b'!'..=b'~') && !matches!(b, b'{' | b'}' | b'=' | b',' | b'"');
    if name.as_bytes().iter().all(plain) {
        return None;
    }
    if let Some(c) = name.chars().find(|c| c.is_control() || c.is_whitespace() || "{}=,\"".contains(*c)) {
        return Some(format!(
            "{what} {} contains {c:?} (control characters, whitespace and {{ }} = , \" are not allowed)",
            shown()
        ));
    }
    None
}

/// Timestamps must lie in `[MIN_TIME_NS, MAX_TIME_NS]`: 1970-01-01 to 2262-04-11 minus a day,
/// so that clock corrections of up to a day never overflow `i64`.
pub const MIN_TIME_NS: i64 = 0;
/// Upper bound of accepted timestamps (see [`MIN_TIME_NS`]).
pub const MAX_TIME_NS: i64 = i64::MAX - 86_400_000_000_000;

/// A metric name, label key or label value: immutable text behind a reference count, so that
/// the many series sharing a name share one allocation.
///
/// A catalog of a million series (2,000 hosts × 64 metrics × 8 GPUs) holds 64 distinct metric
/// names, two label keys and about 2,000 distinct label values; with a `String` each the
/// catalog allocated five strings per series, with `Name` the catalog keeps one copy of each
/// ([`crate::series::SeriesCatalog`] interns them). Compares, hashes and orders as the text
/// (so a `HashMap<Name, _>` is looked up with a `&str`), and serialises as a string.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Name(Arc<str>);

impl Name {
    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether two names share one allocation (the same interned name).
    pub fn ptr_eq(a: &Name, b: &Name) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }
}

impl std::ops::Deref for Name {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for Name {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Name {
    fn from(s: &str) -> Self {
        Name(Arc::from(s))
    }
}

impl From<String> for Name {
    fn from(s: String) -> Self {
        Name(Arc::from(s))
    }
}

impl From<&String> for Name {
    fn from(s: &String) -> Self {
        Name(Arc::from(s.as_str()))
    }
}

impl From<&Name> for Name {
    fn from(s: &Name) -> Self {
        s.clone()
    }
}

impl From<std::borrow::Cow<'_, str>> for Name {
    fn from(s: std::borrow::Cow<'_, str>) -> Self {
        Name(Arc::from(s.as_ref()))
    }
}

impl From<Name> for String {
    fn from(s: Name) -> Self {
        s.0.as_ref().to_owned()
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl PartialEq<String> for Name {
    fn eq(&self, other: &String) -> bool {
        &*self.0 == other.as_str()
    }
}

impl PartialEq<Name> for str {
    fn eq(&self, other: &Name) -> bool {
        self == &*other.0
    }
}

impl PartialEq<Name> for &str {
    fn eq(&self, other: &Name) -> bool {
        *self == &*other.0
    }
}

impl PartialEq<Name> for String {
    fn eq(&self, other: &Name) -> bool {
        self.as_str() == &*other.0
    }
}

impl Serialize for Name {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        Text::deserialize(deserializer).map(|Text(s)| Name::from(s))
    }
}

/// A metric name plus labels. Labels are kept sorted by key; `host` is required.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SeriesKey {
    /// Metric name, e.g. `DCGM_FI_DEV_GPU_UTIL`.
    pub metric: Name,
    /// Label key → value. Empty values are not stored (absent = empty).
    pub labels: Labels,
}

/// The labels of a series: key → value pairs, sorted by key, keys unique.
///
/// A sorted vector rather than a `BTreeMap`: a series has a handful of labels and the catalog
/// keeps one set per series for the life of the store; a `BTreeMap` allocates a 544-byte node
/// however few entries it holds, this allocates exactly what the pairs need. Iteration order,
/// equality and ordering are those of the `BTreeMap` it replaces, and it serialises as the
/// same map.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Labels(Vec<(Name, Name)>);

impl Labels {
    /// No labels.
    pub const fn new() -> Self {
        Labels(Vec::new())
    }

    fn position(&self, key: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_str().cmp(key))
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&Name> {
        self.position(key).ok().map(|i| &self.0[i].1)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.position(key).is_ok()
    }

    /// Sets `key` to `value`; returns the value it replaced.
    pub fn insert(&mut self, key: impl Into<Name>, value: impl Into<Name>) -> Option<Name> {
        let key = key.into();
        match self.position(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, value.into())),
            Err(i) => {
                self.0.insert(i, (key, value.into()));
                None
            }
        }
    }

    /// Removes `key`; returns its value.
    pub fn remove(&mut self, key: &str) -> Option<Name> {
        self.position(key).ok().map(|i| self.0.remove(i).1)
    }

    /// Number of labels.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no labels.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `(key, value)` pairs in key order.
    pub fn iter(&self) -> LabelIter<'_> {
        self.into_iter()
    }

    /// Keys in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &Name> + ExactSizeIterator {
        self.0.iter().map(|(k, _)| k)
    }

    /// Frees spare capacity (call before keeping the labels for long).
    pub fn shrink_to_fit(&mut self) {
        self.0.shrink_to_fit();
    }

    /// The pairs, to replace names in place (the catalog's interning: same text, shared
    /// allocation; changing the text would break the order).
    pub(crate) fn pairs_mut(&mut self) -> &mut [(Name, Name)] {
        &mut self.0
    }

    /// Labels of pairs already sorted by key, each key once (the catalog's own names for a
    /// key it checked, see [`crate::series::SeriesCatalog::get_or_insert_parts`]).
    pub(crate) fn from_sorted(pairs: Vec<(Name, Name)>) -> Self {
        debug_assert!(pairs.windows(2).all(|w| w[0].0 < w[1].0), "labels not sorted");
        Labels(pairs)
    }

    /// Pairs allocated for (tests: a loaded catalog keeps no spare room).
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.0.capacity()
    }
}

/// Iterator over [`Labels`] as `(&key, &value)`.
pub type LabelIter<'a> = std::iter::Map<std::slice::Iter<'a, (Name, Name)>, fn(&(Name, Name)) -> (&Name, &Name)>;

impl<'a> IntoIterator for &'a Labels {
    type Item = (&'a Name, &'a Name);
    type IntoIter = LabelIter<'a>;

    fn into_iter(self) -> LabelIter<'a> {
        fn pair((k, v): &(Name, Name)) -> (&Name, &Name) {
            (k, v)
        }
        self.0.iter().map(pair as fn(&(Name, Name)) -> (&Name, &Name))
    }
}

impl<K: Into<Name>, V: Into<Name>> FromIterator<(K, V)> for Labels {
    /// Collects pairs; for a key given more than once the last value wins (as in a map).
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut pairs: Vec<(Name, Name)> = iter.into_iter().map(|(k, v)| (k.into(), v.into())).collect();
        // Stable sort keeps equal keys in input order; keep the last of each run.
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out: Vec<(Name, Name)> = Vec::with_capacity(pairs.len());
        for pair in pairs {
            match out.last_mut() {
                Some(last) if last.0 == pair.0 => *last = pair,
                _ => out.push(pair),
            }
        }
        // A repeated key left room for a pair that is not there.
        out.shrink_to_fit();
        Labels(out)
    }
}

impl From<BTreeMap<String, String>> for Labels {
    fn from(map: BTreeMap<String, String>) -> Self {
        Labels(map.into_iter().map(|(k, v)| (k.into(), v.into())).collect())
    }
}

impl std::ops::Index<&str> for Labels {
    type Output = Name;

    /// The value of `key`; panics if it is absent (use [`Labels::get`] unless it cannot be).
    fn index(&self, key: &str) -> &Name {
        match self.get(key) {
            Some(v) => v,
            None => panic!("no label {key:?}"),
        }
    }
}

impl Serialize for Labels {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Labels {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        deserializer.deserialize_map(LabelsVisitor { intern: None, scratch: &mut Vec::new() })
    }
}

/// Reads a map of labels into [`Labels`] (sorted, the last value of a repeated key winning),
/// taking each name through `intern` when given: how the catalog loader shares names across a
/// million series without allocating each. The pairs are gathered in `scratch` (kept between
/// keys by the loader) and then copied into a vector of exactly their number: a map's size is
/// not known before it is read, and labels are kept for the life of the catalog.
pub(crate) struct LabelsVisitor<'i> {
    pub(crate) intern: Option<&'i mut dyn FnMut(&str) -> Name>,
    pub(crate) scratch: &'i mut Vec<(Name, Name)>,
}

impl<'de> serde::de::Visitor<'de> for LabelsVisitor<'_> {
    type Value = Labels;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map of label names to values")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(mut self, mut map: A) -> std::result::Result<Labels, A::Error> {
        let pairs = &mut *self.scratch;
        pairs.clear();
        let mut sorted = true;
        while let Some(Text(k)) = map.next_key::<Text<'de>>()? {
            let Text(v) = map.next_value::<Text<'de>>()?;
            let (k, v) = match self.intern.as_mut() {
                Some(intern) => (intern(&k), intern(&v)),
                None => (Name::from(k), Name::from(v)),
            };
            sorted &= pairs.last().is_none_or(|(last, _)| *last < k);
            pairs.push((k, v));
        }
        if !sorted {
            return Ok(pairs.drain(..).collect());
        }
        // One allocation of exactly the pairs; `scratch` keeps its room for the next key.
        let mut exact = Vec::with_capacity(pairs.len());
        exact.append(pairs);
        Ok(Labels(exact))
    }
}

/// A string as deserialised: borrowed from the input when it can be (no escapes), so that
/// reading a name that is already known costs no allocation.
pub(crate) struct Text<'a>(pub(crate) std::borrow::Cow<'a, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Text<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E: serde::de::Error>(self, s: &'de str) -> std::result::Result<Text<'de>, E> {
                Ok(Text(std::borrow::Cow::Borrowed(s)))
            }

            fn visit_str<E: serde::de::Error>(self, s: &str) -> std::result::Result<Text<'de>, E> {
                Ok(Text(std::borrow::Cow::Owned(s.to_owned())))
            }

            fn visit_string<E: serde::de::Error>(self, s: String) -> std::result::Result<Text<'de>, E> {
                Ok(Text(std::borrow::Cow::Owned(s)))
            }
        }
        deserializer.deserialize_str(V)
    }
}

impl SeriesKey {
    /// Builds a key from a metric and label pairs, dropping empty label values.
    pub fn new<K, V>(metric: impl Into<Name>, labels: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: Into<Name>,
        V: Into<Name>,
    {
        let labels = labels
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .filter(|(_, v): &(Name, Name)| !v.is_empty())
            .collect();
        SeriesKey { metric: metric.into(), labels }
    }

    /// The `host` label.
    pub fn host(&self) -> Option<&str> {
        self.labels.get(HOST_LABEL).map(Name::as_str)
    }

    /// Checks the key: a valid metric name, a `host` label, at most [`MAX_LABELS`] labels,
    /// valid label keys (not reserved) and values. Names and keys are 1 to
    /// [`MAX_METRIC_NAME_BYTES`] / [`MAX_LABEL_KEY_BYTES`] bytes without control characters,
    /// whitespace or `{ } = , "`; values are at most [`MAX_LABEL_VALUE_BYTES`] bytes without NUL.
    pub fn validate(&self) -> Result<()> {
        validate_parts(&self.metric, self.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }

    /// Whether this is the key `metric{labels}`, `labels` given sorted by key, each key once
    /// (as [`Labels`] holds them).
    pub fn eq_parts(&self, metric: &str, labels: &[(&str, &str)]) -> bool {
        self.metric.as_str() == metric
            && self.labels.len() == labels.len()
            && self.labels.iter().zip(labels).all(|((k, v), (k2, v2))| k.as_str() == *k2 && v.as_str() == *v2)
    }
}

/// [`SeriesKey::validate`] of the key `metric{labels}`, `labels` sorted by key, each key once
/// (no key is built: the catalog checks a WAL record's definitions on the record's bytes).
pub(crate) fn validate_parts<'a>(
    metric: &str,
    labels: impl ExactSizeIterator<Item = (&'a str, &'a str)> + Clone,
) -> Result<()> {
    if let Some(reason) = check_name("metric name", metric, MAX_METRIC_NAME_BYTES) {
        return Err(Error::InvalidSeries { reason });
    }
    if !labels.clone().any(|(k, _)| k == HOST_LABEL) {
        return Err(Error::MissingHost { metric: metric.to_string() });
    }
    if labels.len() > MAX_LABELS {
        return Err(Error::InvalidSeries {
            reason: format!("series {metric} has {} labels (at most {MAX_LABELS})", labels.len()),
        });
    }
    for (key, value) in labels {
        if let Some(reason) = check_name("label key", key, MAX_LABEL_KEY_BYTES) {
            return Err(Error::InvalidSeries { reason: format!("{reason} (series {metric})") });
        }
        if RESERVED_LABELS.contains(&key) {
            return Err(Error::InvalidSeries { reason: format!("label key {key:?} is reserved (series {metric})") });
        }
        if value.len() > MAX_LABEL_VALUE_BYTES {
            return Err(Error::InvalidSeries {
                reason: format!(
                    "value of label {key:?} is {} bytes long (at most {MAX_LABEL_VALUE_BYTES}; series {metric})",
                    value.len(),
                ),
            });
        }
        if value.contains('\0') {
            return Err(Error::InvalidSeries {
                reason: format!("value of label {key:?} contains NUL (series {metric})"),
            });
        }
    }
    Ok(())
}

impl SeriesKey {
    /// The key as text, cut to at most `max` bytes (with `...`): for messages about keys that
    /// failed [`SeriesKey::validate`], which may be megabytes long.
    pub fn display_bounded(&self, max: usize) -> String {
        let mut text = self.to_string();
        if text.len() > max {
            let cut = (0..=max).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
            text.truncate(cut);
            text.push_str("...");
        }
        text
    }
}

impl fmt::Display for SeriesKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{{", self.metric)?;
        for (i, (k, v)) in self.labels.iter().enumerate() {
            if i > 0 {
                write!(f, ",")?;
            }
            write!(f, "{k}={v:?}")?;
        }
        write!(f, "}}")
    }
}

/// Samples of one series in a write: parallel timestamp and value columns.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SeriesSamples {
    /// Local timestamps, ns since the Unix epoch in the clock of the series' host.
    pub timestamps: Vec<i64>,
    /// Values (NaN and ±inf are allowed and stored as given).
    pub values: Vec<f64>,
}

/// A columnar write: samples grouped by series.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WriteBatch {
    /// Series and their samples. A series may appear more than once.
    pub series: Vec<(SeriesKey, SeriesSamples)>,
}

impl WriteBatch {
    /// Total number of samples.
    pub fn len(&self) -> usize {
        self.series.iter().map(|(_, s)| s.timestamps.len()).sum()
    }

    /// Whether the batch holds no samples.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds one sample.
    pub fn push(&mut self, key: SeriesKey, time: i64, value: f64) {
        if let Some((k, s)) = self.series.last_mut()
            && *k == key
        {
            s.timestamps.push(time);
            s.values.push(value);
            return;
        }
        self.series.push((key, SeriesSamples { timestamps: vec![time], values: vec![value] }));
    }
}

/// Checks that a timestamp lies in the accepted range.
pub fn validate_time(series: &SeriesKey, time: i64) -> Result<()> {
    if !(MIN_TIME_NS..=MAX_TIME_NS).contains(&time) {
        return Err(Error::InvalidSample {
            series: series.to_string(),
            reason: format!("timestamp {time} ns is outside [{MIN_TIME_NS}, {MAX_TIME_NS}]"),
        });
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// `Labels` behaves like the `BTreeMap` it replaced: same pairs, order, comparison and JSON.
        #[test]
        fn labels_match_a_btreemap(pairs in proptest::collection::vec(("[a-d]{1,2}", "[x-z]{0,2}"), 0..12),
                                   other in proptest::collection::vec(("[a-d]{1,2}", "[x-z]{0,2}"), 0..12)) {
            let map: BTreeMap<String, String> = pairs.iter().cloned().collect();
            let labels: Labels = pairs.iter().cloned().collect();
            let strs = |l: &Labels| l.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>();
            prop_assert_eq!(strs(&labels), map.clone().into_iter().collect::<Vec<_>>());
            prop_assert_eq!(labels.len(), map.len());
            for (k, _) in &pairs {
                prop_assert_eq!(labels.get(k).map(Name::as_str), map.get(k).map(String::as_str));
            }
            prop_assert_eq!(labels.get("q"), None);
            let json = serde_json::to_string(&labels).unwrap();
            prop_assert_eq!(&json, &serde_json::to_string(&map).unwrap());
            prop_assert_eq!(serde_json::from_str::<Labels>(&json).unwrap(), labels.clone());

            let other_map: BTreeMap<String, String> = other.iter().cloned().collect();
            let other_labels = Labels::from(other_map.clone());
            prop_assert_eq!(labels.cmp(&other_labels), map.cmp(&other_map));

            let mut inserted = Labels::new();
            let mut m2 = BTreeMap::new();
            for (k, v) in &pairs {
                prop_assert_eq!(inserted.insert(k.clone(), v.clone()).map(String::from), m2.insert(k.clone(), v.clone()));
            }
            prop_assert_eq!(&inserted, &labels);
            if let Some((k, _)) = pairs.first() {
                prop_assert_eq!(inserted.remove(k).map(String::from), m2.remove(k));
                prop_assert!(!inserted.contains_key(k));
            }
        }
    }

    proptest! {
        /// The byte-wise fast path of `check_name` accepts exactly what the character rule does.
        #[test]
        fn check_name_fast_path_agrees_with_the_rule(name in "[ -~\u{0}-\u{1f}\u{7f}\u{a0}\u{85}\u{2028}é日]{0,12}") {
            let rule = !name.is_empty()
                && !name.chars().any(|c| c.is_control() || c.is_whitespace() || "{}=,\"".contains(c));
            prop_assert_eq!(check_name("label key", &name, 64).is_none(), rule, "{:?}", name);
        }
    }

    #[test]
    fn too_many_labels_are_refused_by_name() {
        let mut labels: Vec<(String, String)> =
            (0..MAX_LABELS).map(|i| (format!("k{i:03}"), "v".to_string())).collect();
        labels[0] = ("host".into(), "h".into());
        assert!(SeriesKey::new("m", labels.clone()).validate().is_ok());
        labels.push(("zz".into(), "v".into()));
        let err = SeriesKey::new("m", labels).validate().unwrap_err().to_string();
        assert!(err.contains("129 labels (at most 128)"), "{err}");
    }

    #[test]
    fn names_are_limited_in_length_and_characters() {
        let key = |metric: &str, k: &str, v: &str| SeriesKey::new(metric, [("host", "h"), (k, v)]).validate();
        assert!(key("DCGM_FI_DEV_GPU_UTIL", "gpu", "0").is_ok());
        assert!(key("nccl:allreduce.bytes", "gpu-id", "a value with spaces").is_ok());
        let long = "m".repeat(1 << 20);
        let cases = [
            (key("gpu\0util", "gpu", "0"), "metric name \"gpu\\0util\" contains '\\0'"),
            (key(&long, "gpu", "0"), "is 1048576 bytes long (at most 256)"),
            (key(&"m".repeat(257), "gpu", "0"), "(at most 256)"),
            (key("m", "gpu id", "0"), "label key \"gpu id\" contains ' '"),
            (key("m", "a=b", "0"), "contains '='"),
            (key("m", &"k".repeat(129), "0"), "label key \"kkkk"),
            (key("m", "gpu", &long), "value of label \"gpu\" is 1048576 bytes long (at most 4096"),
            (key("m", "gpu", "a\0b"), "value of label \"gpu\" contains NUL"),
        ];
        for (result, want) in cases {
            let e = result.unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
            let text = e.to_string();
            assert!(text.contains(want), "{text} lacks {want}");
            assert!(text.len() < 400, "the message quotes a long name in full: {} bytes", text.len());
        }
        assert!(key("m", "gpu", &"v".repeat(4096)).is_ok());
        assert!(key(&"m".repeat(256), "gpu", "0").is_ok());
    }

    #[test]
    fn reverse_ordered_labels_collect_in_one_sort() {
        // 200,000 pairs in descending key order: quadratic insertion would take minutes.
        let labels: Labels = (0..200_000).rev().map(|i| (format!("k{i:06}"), "v")).collect();
        assert_eq!(labels.len(), 200_000);
        assert_eq!(labels.keys().next().map(Name::as_str), Some("k000000"));
    }
}

/// Columnar rows of samples named by series id: what the buffer holds, data files store and
/// scans return. Sorted by (series, time) and free of duplicates when they come from or go to
/// a data file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rows {
    /// Series ids.
    pub series: Vec<u32>,
    /// Local timestamps (ns).
    pub time: Vec<i64>,
    /// Values.
    pub value: Vec<f64>,
}

impl Rows {
    /// Number of rows.
    pub fn len(&self) -> usize {
        self.series.len()
    }
    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }
    /// An empty set with room for `n` rows.
    pub fn with_capacity(n: usize) -> Self {
        Rows { series: Vec::with_capacity(n), time: Vec::with_capacity(n), value: Vec::with_capacity(n) }
    }
    /// The index ranges of the runs of consecutive rows with one series id, in order.
    pub fn runs(&self) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
        let ids = &self.series;
        let mut start = 0;
        std::iter::from_fn(move || {
            let id = *ids.get(start)?;
            let len = ids[start..].iter().position(|&x| x != id).unwrap_or(ids.len() - start);
            let run = start..start + len;
            start += len;
            Some(run)
        })
    }
    /// Appends one row.
    pub fn push(&mut self, series: u32, time: i64, value: f64) {
        self.series.push(series);
        self.time.push(time);
        self.value.push(value);
    }
    /// Appends rows `start..end` of `other`.
    pub fn extend_range(&mut self, other: &Rows, start: usize, end: usize) {
        self.series.extend_from_slice(&other.series[start..end]);
        self.time.extend_from_slice(&other.time[start..end]);
        self.value.extend_from_slice(&other.value[start..end]);
    }
    /// Removes every row, keeping the capacity.
    pub fn clear(&mut self) {
        self.series.clear();
        self.time.clear();
        self.value.clear();
    }
    /// Appends all rows of `other`.
    pub fn extend_from(&mut self, other: &Rows) {
        self.series.extend_from_slice(&other.series);
        self.time.extend_from_slice(&other.time);
        self.value.extend_from_slice(&other.value);
    }
}
