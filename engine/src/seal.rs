//! Sealed JSON: a store's JSON state files (`manifest.json`, `series.json`) end in their own
//! CRC-32, so that a flipped bit that still parses — a digit of a file's time range, a letter
//! of a label value — is an error instead of a silently different store.
//!
//! The writer serialises the document, computes the CRC-32 of those bytes and inserts
//! `,"crc32":"xxxxxxxx"` (8 lowercase hex digits) before the final `}`. The file stays JSON
//! (any reader sees one more top-level key). A reader whose bytes end in that field checks the
//! CRC of the bytes with the field removed, which are the bytes that were written; a file
//! without it (written before sealing) is read as it is.

fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// The sealing field, as it ends a sealed file: `,"crc32":"` + 8 hex digits + `"}`.
const PREFIX: &[u8] = b",\"crc32\":\"";
const SEALED_TAIL: usize = PREFIX.len() + 8 + 2;

/// `json` (one JSON object, ending in `}`, optionally followed by whitespace) with its CRC-32
/// inserted as a last top-level field.
pub fn seal(mut json: Vec<u8>) -> Vec<u8> {
    while json.last().is_some_and(u8::is_ascii_whitespace) {
        json.pop();
    }
    let crc = crc32(&json);
    let close = json.pop();
    debug_assert_eq!(close, Some(b'}'));
    json.extend_from_slice(PREFIX);
    json.extend_from_slice(format!("{crc:08x}\"}}").as_bytes());
    json
}

/// The JSON document in `bytes` as it was written: for a sealed file, its bytes without the
/// sealing field once the CRC-32 matches; for an unsealed one (older), `bytes` unchanged.
pub fn unseal(bytes: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>, String> {
    let n = bytes.len();
    let Some(tail) = n.checked_sub(SEALED_TAIL).and_then(|at| bytes.get(at..)) else {
        return Ok(bytes.into());
    };
    if !tail.starts_with(PREFIX) || !tail.ends_with(b"\"}") {
        return Ok(bytes.into());
    }
    let hex =
        std::str::from_utf8(&tail[PREFIX.len()..PREFIX.len() + 8]).map_err(|_| "bad checksum field".to_string())?;
    // Exactly as written: 8 lowercase hex digits.
    let lower_hex = hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let recorded = u32::from_str_radix(hex, 16).ok().filter(|_| lower_hex).ok_or(format!("bad checksum {hex:?}"))?;
    let mut original = bytes[..n - SEALED_TAIL].to_vec();
    original.push(b'}');
    let read = crc32(&original);
    if read != recorded {
        return Err(format!("checksum mismatch (recorded {recorded:08x}, read {read:08x}); the file is corrupt"));
    }
    Ok(original.into())
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
            assert_eq!(unseal(&sealed).unwrap().as_ref(), json.as_slice());
            // Every single-bit flip is an error, or no longer sealed and then not JSON of the
            // same content.
            for at in 0..sealed.len() {
                for bit in [0x01u8, 0x20, 0x80] {
                    let mut b = sealed.clone();
                    b[at] ^= bit;
                    match unseal(&b) {
                        Err(e) => assert!(e.contains("checksum"), "{e}"),
                        Ok(doc_bytes) => {
                            let same = serde_json::from_slice::<serde_json::Value>(&doc_bytes).ok()
                                == Some(serde_json::from_slice::<serde_json::Value>(&json).unwrap());
                            assert!(!same, "flip at {at} ^ {bit:#x} read back as the same document");
                        }
                    }
                }
            }
        }
        // Unsealed (older) files read as they are.
        assert_eq!(unseal(br#"{"version":1}"#).unwrap().as_ref(), br#"{"version":1}"#);
        assert_eq!(unseal(b"").unwrap().as_ref(), b"");
    }
}
