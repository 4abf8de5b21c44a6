//! Column-chunk checksums: a CRC-32 of every column chunk's bytes as stored (page headers and
//! compressed pages), recorded by the writer in the file's key-value metadata under [`KEY`]
//! and checked by every read before a chunk is decoded.
//!
//! Parquet's page CRC is optional and parquet-rs does not write it, so without this a flipped
//! bit in a data page (bad disk, bad RAM, a truncated copy) decodes to a different value with
//! no error — and a compaction would then rewrite that value into a new, healthy-looking file.
//! With it, the read fails with [`Error::DataFileInvalid`](crate::error::Error) naming the row
//! group and column. Files written before the key existed are read unchecked.
//!
//! The footer (metadata and tail) cannot hold its own checksum: the writer returns it in
//! [`FileStats::footer_crc32`](super::FileStats), the manifest keeps it, and readers given it
//! check the footer before parsing it.
//!
//! Encoding: lowercase hex, 8 characters per chunk, row groups in file order and within each
//! the columns in schema order (`docs/format-storage.md`).

/// Key of the checksums in a data file's key-value metadata.
pub const KEY: &str = "lockstep.chunk_crc32";

/// The checksum of a column chunk's bytes.
pub fn of(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// Encodes the checksums of every chunk, row group by row group, for [`KEY`].
pub fn encode(crcs: &[u32]) -> String {
    let mut out = String::with_capacity(crcs.len() * 8);
    for crc in crcs {
        out.push_str(&format!("{crc:08x}"));
    }
    out
}

/// Decodes [`KEY`]'s value for a file of `groups` row groups of `columns` columns.
pub fn decode(text: &str, groups: usize, columns: usize) -> Result<Vec<u32>, String> {
    let want = groups.saturating_mul(columns);
    if text.len() != want.saturating_mul(8) {
        return Err(format!(
            "{KEY} holds {} characters, {groups} row groups of {columns} columns need {}",
            text.len(),
            want.saturating_mul(8)
        ));
    }
    (0..want)
        .map(|i| {
            let hex = text.get(i * 8..i * 8 + 8).ok_or_else(|| format!("{KEY} is not ASCII"))?;
            u32::from_str_radix(hex, 16).map_err(|_| format!("{KEY} has a bad checksum {hex:?}"))
        })
        .collect()
}

/// The footer at the end of `bytes` (the end of a Parquet file): the metadata, its 4-byte
/// length and the magic `PAR1`.
pub fn footer_of(bytes: &[u8]) -> Result<&[u8], String> {
    let n = bytes.len();
    let tail = bytes.get(n.saturating_sub(8)..).filter(|t| t.len() == 8 && t[4..] == *b"PAR1");
    let tail = tail.ok_or_else(|| format!("{n} bytes do not end in a parquet footer"))?;
    let meta = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]) as usize;
    let start = n.checked_sub(meta.saturating_add(8));
    start.and_then(|s| bytes.get(s..)).ok_or_else(|| format!("a footer of {meta} bytes does not fit in {n} bytes"))
}

/// Checks a footer, given as its consecutive parts, against the checksum recorded in the
/// manifest (`None`: nothing recorded, nothing to check).
pub fn verify_footer(parts: &[&[u8]], expected: Option<u32>) -> Result<(), String> {
    let Some(expected) = expected else {
        return Ok(());
    };
    let mut hasher = crc32fast::Hasher::new();
    parts.iter().for_each(|p| hasher.update(p));
    let got = hasher.finalize();
    if got == expected {
        return Ok(());
    }
    Err(format!("footer checksum mismatch (recorded {expected:08x}, read {got:08x}); the file is corrupt"))
}

/// The checksums recorded in a file's metadata (`None`: written before they were recorded).
pub fn of_metadata(meta: &parquet::file::metadata::ParquetMetaData) -> Result<Option<Vec<u32>>, String> {
    let Some(kv) = meta.file_metadata().key_value_metadata() else {
        return Ok(None);
    };
    let Some(text) = kv.iter().find(|kv| kv.key == KEY).and_then(|kv| kv.value.as_deref()) else {
        return Ok(None);
    };
    let columns = meta.file_metadata().schema_descr().num_columns();
    decode(text, meta.num_row_groups(), columns).map(Some)
}

/// The recorded checksum of column `leaf` in row group `group` of a file with `columns`
/// columns, if any.
pub fn expected(crcs: Option<&[u32]>, group: usize, leaf: usize, columns: usize) -> Option<u32> {
    crcs?.get(group.checked_mul(columns)?.checked_add(leaf)?).copied()
}

/// Checks the bytes of the chunk of column `leaf` in row group `group` against `expected`.
pub fn verify(bytes: &[u8], expected: u32, group: usize, leaf: usize) -> Result<(), String> {
    let got = of(bytes);
    if got == expected {
        return Ok(());
    }
    let name = super::file_schema().fields().get(leaf).map_or_else(|| format!("{leaf}"), |f| f.name().clone());
    Err(format!(
        "row group {group} column {name}: checksum mismatch (recorded {expected:08x}, read {got:08x}); \
         the file is corrupt"
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_round_trip_and_reject_bad_text() {
        let crcs = [0u32, 1, 0xdead_beef, u32::MAX, 0x0102_0304, 7];
        let text = encode(&crcs);
        assert_eq!(text.len(), 48);
        assert_eq!(decode(&text, 2, 3).unwrap(), crcs);
        assert!(decode(&text, 3, 3).unwrap_err().contains("need 72"));
        assert!(decode(&text[..47], 2, 3).is_err());
        let bad = text.replacen('d', "g", 1);
        assert!(decode(&bad, 2, 3).unwrap_err().contains("bad checksum"));
        // Multi-byte characters at a slice boundary are an error, not a panic.
        let wide = format!("é{}", &text[2..]);
        assert_eq!(wide.len(), text.len());
        assert!(decode(&wide, 2, 3).is_err());
    }

    #[test]
    fn verify_names_the_chunk() {
        let bytes = b"some column chunk";
        assert!(verify(bytes, of(bytes), 0, 2).is_ok());
        let e = verify(bytes, of(bytes) ^ 1, 3, 2).unwrap_err();
        assert!(e.contains("row group 3 column value_int") && e.contains("corrupt"), "{e}");
    }
}
