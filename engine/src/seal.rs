//! Sealed JSON: a store's JSON state files (`manifest.json`, `series.json`) end in their own
//! CRC-32, so that a flipped bit that still parses — a digit of a file's time range, a letter
//! of a label value — is an error instead of a silently different store.
//!
//! The writer serialises the document, computes the CRC-32 of those bytes and inserts
//! `,"crc32":"xxxxxxxx"` (8 lowercase hex digits) before the final `}`. The file stays JSON
//! (any reader sees one more top-level key, which serde ignores). A reader whose bytes end in
//! that field checks the CRC of the bytes with the field removed, which are the bytes that were
//! written, and parses the file as it is; a file without it (written before sealing) is read
//! as it is.

/// The sealing field, as it ends a sealed file: `,"crc32":"` + 8 hex digits + `"}`.
const PREFIX: &[u8] = b",\"crc32\":\"";
pub(crate) const SEALED_TAIL: usize = PREFIX.len() + 8 + 2;

/// `json` (one JSON object, ending in `}`, optionally followed by whitespace) with its CRC-32
/// inserted as a last top-level field.
pub fn seal(mut json: Vec<u8>) -> Vec<u8> {
    while json.last().is_some_and(u8::is_ascii_whitespace) {
        json.pop();
    }
    let crc = crc32fast::hash(&json);
    let close = json.pop();
    debug_assert_eq!(close, Some(b'}'));
    json.extend_from_slice(PREFIX);
    json.extend_from_slice(format!("{crc:08x}\"}}").as_bytes());
    json
}

/// Checks a sealed file: `Ok(true)` when `bytes` end in the sealing field and its CRC-32
/// matches the bytes written, `Ok(false)` for an unsealed (older) file. Parse `bytes` as they
/// are: the sealing field is one more top-level key, which serde ignores.
pub fn check(bytes: &[u8]) -> Result<bool, String> {
    let n = bytes.len();
    let Some(tail) = n.checked_sub(SEALED_TAIL).and_then(|at| bytes.get(at..)) else {
        return Ok(false);
    };
    if !tail.starts_with(PREFIX) || !tail.ends_with(b"\"}") {
        return Ok(false);
    }
    let hex = &tail[PREFIX.len()..PREFIX.len() + 8];
    // Exactly as written: 8 lowercase hex digits.
    let digit = |b: u8| match b {
        b'0'..=b'9' => Some(u32::from(b - b'0')),
        b'a'..=b'f' => Some(u32::from(b - b'a' + 10)),
        _ => None,
    };
    let recorded = hex
        .iter()
        .try_fold(0u32, |acc, &b| Some(acc << 4 | digit(b)?))
        .ok_or_else(|| format!("bad checksum {:?}", String::from_utf8_lossy(hex)))?;
    // The bytes written: everything before the sealing field, and the closing brace.
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&bytes[..n - SEALED_TAIL]);
    hasher.update(b"}");
    let read = hasher.finalize();
    if read != recorded {
        return Err(format!("checksum mismatch (recorded {recorded:08x}, read {read:08x}); the file is corrupt"));
    }
    Ok(true)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn sealed_json_round_trips_parses_and_detects_any_flip() {
        let doc = serde_json::json!({"version": 1, "files": [{"path": "data/p1/1.parquet", "min_time": 5}]});
        for pretty in [false, true] {
            let json = if pretty { serde_json::to_vec_pretty(&doc) } else { serde_json::to_vec(&doc) }.unwrap();
            let sealed = seal(json.clone());
            // Still JSON, with one more key.
            let parsed: serde_json::Value = serde_json::from_slice(&sealed).unwrap();
            assert_eq!(parsed["files"], doc["files"]);
            assert!(parsed["crc32"].is_string());
            assert_eq!(check(&sealed), Ok(true));
            // Every single-bit flip is an error, or no longer sealed and then not JSON of the
            // same content.
            for at in 0..sealed.len() {
                for bit in [0x01u8, 0x20, 0x80] {
                    let mut b = sealed.clone();
                    b[at] ^= bit;
                    match check(&b) {
                        Err(e) => assert!(e.contains("checksum"), "{e}"),
                        Ok(sealed) => {
                            // Not sealed any more: a flip in the sealing field itself; the
                            // document then differs from the one written (a renamed key, or
                            // not JSON at all).
                            assert!(!sealed, "flip at {at} ^ {bit:#x} still checks");
                            let got = serde_json::from_slice::<serde_json::Value>(&b).ok();
                            assert_ne!(got.as_ref(), Some(&parsed), "flip at {at} ^ {bit:#x} read back the same");
                        }
                    }
                }
            }
        }
        // Unsealed (older) files read as they are.
        assert_eq!(check(br#"{"version":1}"#), Ok(false));
        assert_eq!(check(b""), Ok(false));
    }
}
