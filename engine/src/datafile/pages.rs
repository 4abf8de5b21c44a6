//! A direct decoder for the two nullable 8-byte value columns (`value_int`, `value_float`),
//! whose pages the writer encodes as `BYTE_STREAM_SPLIT`, and for the nullable `value_scale`
//! codes (`DELTA_BINARY_PACKED`; parquet-rs decodes them to 32 bits, pads the nulls and casts,
//! about an eighth of a full scan).
//!
//! parquet-rs joins the eight byte streams one byte at a time (upstream arrow-rs issue
//! #10006), a quarter of a full scan's time (`benches/README.md`, *a bundle four times
//! larger*). This module reads the same pages through parquet-rs's page reader (headers,
//! decompression) and does two things itself: the definition levels (run-length/bit-packed
//! hybrid, bit width 1, straight into a validity bitmap) and the byte-stream join, eight values
//! at a time as an 8x8 byte transpose in registers.
//!
//! It handles exactly one shape: a flat optional column (maximum definition level 1, no
//! repetition) whose data pages (v1 or v2) are all `BYTE_STREAM_SPLIT` with RLE levels and no
//! dictionary. Anything else, or any page that does not parse exactly, returns `None` and the
//! caller decodes with parquet-rs as before, so this path never accepts what parquet-rs would
//! reject nor reads it differently.

use std::sync::Arc;

use arrow::array::BooleanBufferBuilder;
use arrow::array::{ArrayRef, Float64Array, Int8Array, Int64Array};
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer, ScalarBuffer};
use parquet::basic::{Encoding, Type as PhysicalType};
use parquet::column::page::{Page, PageReader};
use parquet::file::metadata::ColumnChunkMetaData;
use parquet::file::reader::ChunkReader;
use parquet::file::serialized_reader::SerializedPageReader;

use super::codec::unzigzag;

/// Decodes the column chunk `meta` (of a row group of `rows` rows) read through `reader` into
/// an `Int64Array` or `Float64Array` by its physical type; `None` when the chunk is not of the
/// one shape handled here (see the module documentation).
pub(super) fn decode_split_chunk<R: ChunkReader + 'static>(
    reader: Arc<R>,
    meta: &ColumnChunkMetaData,
    rows: usize,
) -> Option<ArrayRef> {
    let float = match meta.column_descr().physical_type() {
        PhysicalType::INT64 => false,
        PhysicalType::DOUBLE => true,
        _ => return None,
    };
    // Rows decoded so far are `values` and then `filled - values.len()` nulls whose (zero)
    // values are written only when a value follows them: a chunk of nulls alone (the float
    // column of a row group of decimals) never writes its values buffer.
    let mut values: Vec<u64> = Vec::new();
    let mut filled = 0usize;
    let valid = for_each_page(reader, meta, rows, Encoding::BYTE_STREAM_SPLIT, |data, page_valid| {
        let present = page_valid.count_set_bits();
        if data.len() != present.checked_mul(8)? {
            return None;
        }
        let mut next = 0;
        for (start, end) in page_valid.set_slices() {
            values.reserve(rows.saturating_sub(values.len()));
            values.resize(filled + start, 0);
            join_streams(data, present, next, end - start, &mut values);
            next += end - start;
        }
        filled += page_valid.len();
        Some(())
    })?;
    if values.is_empty() && rows > 0 {
        return Some(if float { Arc::new(Float64Array::new_null(rows)) } else { Arc::new(Int64Array::new_null(rows)) });
    }
    values.resize(rows, 0);
    let nulls = (valid.count_set_bits() != rows).then(|| NullBuffer::new(valid));
    let buffer = Buffer::from_vec(values);
    Some(if float {
        Arc::new(Float64Array::new(ScalarBuffer::new(buffer, 0, rows), nulls))
    } else {
        Arc::new(Int64Array::new(ScalarBuffer::new(buffer, 0, rows), nulls))
    })
}

/// Decodes the `value_scale` column chunk `meta` (32-bit integers holding 8-bit codes,
/// `DELTA_BINARY_PACKED`) of a row group of `rows` rows into an `Int8Array`; `None` when the
/// chunk is not of that shape or a value does not fit 8 bits (parquet-rs then decides).
pub(super) fn decode_delta_i8_chunk<R: ChunkReader + 'static>(
    reader: Arc<R>,
    meta: &ColumnChunkMetaData,
    rows: usize,
) -> Option<ArrayRef> {
    if meta.column_descr().physical_type() != PhysicalType::INT32 {
        return None;
    }
    let mut values: Vec<i8> = Vec::with_capacity(rows);
    let mut dense: Vec<i8> = Vec::new();
    let valid = for_each_page(reader, meta, rows, Encoding::DELTA_BINARY_PACKED, |data, page_valid| {
        dense.clear();
        delta_values(data, page_valid.count_set_bits(), &mut dense)?;
        let at = values.len();
        let mut next = 0;
        for (start, end) in page_valid.set_slices() {
            values.resize(at + start, 0);
            values.extend_from_slice(&dense[next..next + (end - start)]);
            next += end - start;
        }
        values.resize(at + page_valid.len(), 0);
        Some(())
    })?;
    let nulls = (valid.count_set_bits() != rows).then(|| NullBuffer::new(valid));
    Some(Arc::new(Int8Array::new(ScalarBuffer::from(values), nulls)))
}

/// Calls `decode` with the value bytes and the validity of each data page of the column chunk
/// `meta` (`rows` rows), a flat optional column whose data pages (v1 or v2) must all be in
/// `encoding` with RLE levels; returns the chunk's validity. `None` when a page is of another
/// shape, does not parse, `decode` declines or the pages do not hold `rows` rows.
fn for_each_page<R: ChunkReader + 'static>(
    reader: Arc<R>,
    meta: &ColumnChunkMetaData,
    rows: usize,
    encoding: Encoding,
    mut decode: impl FnMut(&[u8], &BooleanBuffer) -> Option<()>,
) -> Option<BooleanBuffer> {
    let descr = meta.column_descr();
    if descr.max_def_level() != 1 || descr.max_rep_level() != 0 {
        return None;
    }
    let mut pages = SerializedPageReader::new(reader, meta, rows, None).ok()?;
    let mut valid = BooleanBufferBuilder::new(rows);
    while let Some(page) = pages.get_next_page().ok()? {
        let (buf, levels, count) =
            match &page {
                Page::DataPage { buf, num_values, encoding: e, def_level_encoding, .. }
                    if *e == encoding && *def_level_encoding == Encoding::RLE =>
                {
                    let len = u32::from_le_bytes(buf.get(..4)?.try_into().ok()?) as usize;
                    (buf, 4..4usize.checked_add(len)?, *num_values as usize)
                }
                Page::DataPageV2 {
                    buf, num_values, encoding: e, def_levels_byte_len, rep_levels_byte_len: 0, ..
                } if *e == encoding => (buf, 0..*def_levels_byte_len as usize, *num_values as usize),
                _ => return None,
            };
        let data = buf.get(levels.end..)?;
        let page_valid = def_levels(buf.get(levels)?, count)?;
        if valid.len().checked_add(count)? > rows {
            return None;
        }
        decode(data, &page_valid)?;
        valid.append_buffer(&page_valid);
    }
    (valid.len() == rows).then(|| valid.finish())
}

/// Appends the `count` values of a `DELTA_BINARY_PACKED` stream of 32-bit integers to `out`;
/// `None` unless the stream parses exactly and every value fits 8 bits. Arithmetic wraps in
/// 32 bits, as the encoding specifies.
fn delta_values(mut bytes: &[u8], count: usize, out: &mut Vec<i8>) -> Option<()> {
    let block = usize::try_from(uleb128(&mut bytes)?).ok()?;
    let minis = usize::try_from(uleb128(&mut bytes)?).ok()?;
    let total = usize::try_from(uleb128(&mut bytes)?).ok()?;
    let mut value = i32::try_from(unzigzag(uleb128(&mut bytes)?)).ok()?;
    // parquet-rs's checks, and a miniblock of a multiple of 32 values (the specification's).
    if total != count || minis == 0 || !block.is_multiple_of(128) || !block.is_multiple_of(minis) {
        return None;
    }
    let per_mini = block / minis;
    if !per_mini.is_multiple_of(32) {
        return None;
    }
    if count == 0 {
        return Some(());
    }
    let narrow = |v: i32| i8::try_from(v).ok();
    out.push(narrow(value)?);
    let mut left = count - 1;
    while left > 0 {
        let min_delta = i32::try_from(unzigzag(uleb128(&mut bytes)?)).ok()?;
        let widths = bytes.get(..minis)?;
        bytes = &bytes[minis..];
        for &width in widths {
            if left == 0 {
                break;
            }
            let (width, n) = (usize::from(width), per_mini.min(left));
            if width > 32 {
                return None;
            }
            let packed = bytes.get(..per_mini.checked_mul(width)? / 8)?;
            bytes = &bytes[packed.len()..];
            if width == 0 {
                // Every delta is `min_delta`: a constant, or a line whose ends both fit 8 bits
                // (then every value between does, and 32-bit wrapping cannot occur).
                let end = i64::from(value) + i64::try_from(n).ok()? * i64::from(min_delta);
                narrow(i32::try_from(end).ok()?)?;
                if min_delta == 0 {
                    out.resize(out.len() + n, narrow(value)?);
                } else {
                    let start = i64::from(value);
                    out.extend((1..=n as i64).map(|k| (start + k * i64::from(min_delta)) as i8));
                    value = end as i32;
                }
            } else {
                let mask = (1u64 << width) - 1;
                let mut fits = true;
                out.extend((0..n).map(|k| {
                    let bit = k * width;
                    let mut word = [0u8; 8];
                    let tail = packed.get(bit / 8..).unwrap_or(&[]);
                    let take = tail.len().min(8);
                    word[..take].copy_from_slice(&tail[..take]);
                    let delta = (u64::from_le_bytes(word) >> (bit % 8)) & mask;
                    value = value.wrapping_add(min_delta).wrapping_add(delta as i32);
                    fits &= narrow(value).is_some();
                    value as i8
                }));
                if !fits {
                    return None;
                }
            }
            left -= n;
        }
    }
    Some(())
}

/// The definition levels of `count` values (RLE/bit-packed hybrid, bit width 1) as a validity
/// bitmap; `None` unless they parse exactly.
fn def_levels(mut bytes: &[u8], count: usize) -> Option<BooleanBuffer> {
    let mut out = BooleanBufferBuilder::new(count);
    while out.len() < count {
        let header = uleb128(&mut bytes)?;
        let left = count - out.len();
        if header & 1 == 1 {
            // Bit-packed: `header >> 1` groups of eight 1-bit levels, one byte per group.
            let groups = usize::try_from(header >> 1).ok()?;
            let packed = bytes.get(..groups)?;
            bytes = &bytes[groups..];
            out.append_packed_range(0..groups.checked_mul(8)?.min(left), packed);
        } else {
            let run = usize::try_from(header >> 1).ok()?;
            let (&level, rest) = bytes.split_first()?;
            bytes = rest;
            if level > 1 || run == 0 {
                return None;
            }
            out.append_n(run.min(left), level == 1);
        }
    }
    Some(out.finish())
}

fn uleb128(bytes: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = bytes.split_first()?;
        *bytes = rest;
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// Appends values `from..from + len` of `data`, eight byte streams of `stride` bytes each
/// (stream `j` holds byte `j` of every value, least significant first), to `out`.
fn join_streams(data: &[u8], stride: usize, from: usize, len: usize, out: &mut Vec<u64>) {
    let streams: [&[u8]; 8] = std::array::from_fn(|j| &data[j * stride + from..j * stride + from + len]);
    let whole = len / 8 * 8;
    out.reserve(len);
    for i in (0..whole).step_by(8) {
        let mut x: [u64; 8] =
            std::array::from_fn(|j| u64::from_le_bytes(streams[j][i..i + 8].try_into().unwrap_or([0; 8])));
        transpose8(&mut x);
        out.extend_from_slice(&x);
    }
    out.extend((whole..len).map(|k| u64::from_le_bytes(std::array::from_fn(|j| streams[j][k]))));
}

/// Transposes the 8x8 byte matrix whose row `j` is `x[j]` (byte `k` = column `k`): three
/// rounds swapping 4-, 2- and 1-byte blocks.
#[inline(always)]
fn transpose8(x: &mut [u64; 8]) {
    const HALF: u64 = 0x0000_0000_FFFF_FFFF;
    const PAIRS: u64 = 0x0000_FFFF_0000_FFFF;
    const BYTES: u64 = 0x00FF_00FF_00FF_00FF;
    for j in 0..4 {
        let (a, b) = (x[j], x[j + 4]);
        x[j] = (a & HALF) | (b << 32);
        x[j + 4] = (a >> 32) | (b & !HALF);
    }
    for j in [0, 1, 4, 5] {
        let (a, b) = (x[j], x[j + 2]);
        x[j] = (a & PAIRS) | ((b & PAIRS) << 16);
        x[j + 2] = ((a >> 16) & PAIRS) | (b & !PAIRS);
    }
    for j in [0, 2, 4, 6] {
        let (a, b) = (x[j], x[j + 1]);
        x[j] = (a & BYTES) | ((b & BYTES) << 8);
        x[j + 1] = ((a >> 8) & BYTES) | (b & !BYTES);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use arrow::array::{Array, Int8Array, RecordBatch};
    use arrow::datatypes::{DataType, Field, Schema};
    use bytes::Bytes;
    use parquet::arrow::ArrowWriter;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::file::properties::{WriterProperties, WriterVersion};

    /// Writes an Int64 and a Float64 column, each null where the other is not, with `props`;
    /// returns the file and the arrays written.
    fn file(rows: usize, float_every: usize, props: WriterProperties) -> (Bytes, Vec<ArrayRef>) {
        let is_float = |i: usize| float_every > 0 && (i.is_multiple_of(float_every) || (i / 1000) % 7 == 3);
        let ints: Int64Array =
            (0..rows).map(|i| (!is_float(i)).then(|| (i as i64 * 7919) % 100_003 - 50_000)).collect();
        let floats: Float64Array = (0..rows).map(|i| is_float(i).then_some(i as f64 * 0.1 + 0.2)).collect();
        let schema = Arc::new(Schema::new(vec![
            Field::new("value_int", DataType::Int64, true),
            Field::new("value_float", DataType::Float64, true),
        ]));
        let arrays: Vec<ArrayRef> = vec![Arc::new(ints), Arc::new(floats)];
        let batch = RecordBatch::try_new(schema.clone(), arrays.clone()).unwrap();
        let mut out = Vec::new();
        let mut w = ArrowWriter::try_new(&mut out, schema, Some(props)).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        (Bytes::from(out), arrays)
    }

    fn split_props(version: WriterVersion) -> parquet::file::properties::WriterPropertiesBuilder {
        props(version, Encoding::BYTE_STREAM_SPLIT)
    }

    fn props(version: WriterVersion, encoding: Encoding) -> parquet::file::properties::WriterPropertiesBuilder {
        WriterProperties::builder()
            .set_writer_version(version)
            .set_dictionary_enabled(false)
            .set_encoding(encoding)
            .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
            .set_data_page_size_limit(4096)
            .set_write_batch_size(1000)
    }

    /// Every chunk of `bytes` decoded directly; `None` if any declined.
    fn direct(bytes: &Bytes) -> Option<Vec<ArrayRef>> {
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes.clone()).unwrap();
        let meta = reader.metadata().clone();
        let mut out: Vec<Vec<ArrayRef>> = vec![Vec::new(), Vec::new()];
        for rg in meta.row_groups() {
            for (leaf, col) in out.iter_mut().enumerate() {
                col.push(decode_split_chunk(Arc::new(bytes.clone()), rg.column(leaf), rg.num_rows() as usize)?);
            }
        }
        Some(
            out.into_iter()
                .map(|parts| {
                    let parts: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
                    arrow::compute::concat(&parts).unwrap()
                })
                .collect(),
        )
    }

    /// Pages v1 and v2, several pages and row groups, all-valid, all-null and mixed columns:
    /// the direct decoder returns what was written, as parquet-rs does; a chunk in another
    /// encoding is declined.
    #[test]
    fn direct_decode_equals_what_was_written_and_declines_other_encodings() {
        for version in [WriterVersion::PARQUET_1_0, WriterVersion::PARQUET_2_0] {
            for float_every in [0, 1, 3, 1_000] {
                let props = split_props(version).set_max_row_group_row_count(Some(9_000)).build();
                let (bytes, written) = file(25_001, float_every, props);
                let meta = ParquetRecordBatchReaderBuilder::try_new(bytes.clone()).unwrap().metadata().clone();
                assert!(meta.num_row_groups() == 3 && meta.row_group(0).column(0).data_page_offset() > 0);
                let got = direct(&bytes).unwrap_or_else(|| panic!("{version:?} {float_every}: declined"));
                assert_eq!(got, written, "{version:?} every {float_every}");
                for (g, w) in got.iter().zip(&written) {
                    assert_eq!(g.null_count(), w.null_count());
                }
            }
        }
        let plain = split_props(WriterVersion::PARQUET_1_0).set_encoding(Encoding::PLAIN).build();
        assert!(direct(&file(5_000, 3, plain).0).is_none());
        let dict = split_props(WriterVersion::PARQUET_1_0).set_dictionary_enabled(true).build();
        assert!(direct(&file(5_000, 3, dict).0).is_none());
    }

    /// `value_scale`-like codes: series runs of one code then its difference code, nulls
    /// (float rows), jumps across the whole 8-bit range; written as `DELTA_BINARY_PACKED`
    /// (v1 and v2 pages, small pages, several row groups) and decoded directly, the result is
    /// what parquet-rs reads; a chunk in another encoding is declined.
    #[test]
    fn delta_codes_decode_as_parquet_rs_does() {
        let rows = 20_011usize;
        let cases: Vec<Vec<Option<i8>>> = vec![
            (0..rows).map(|i| Some(if i % 700 == 0 { 2 } else { 34 })).collect(),
            (0..rows)
                .map(|i| {
                    let run = i / 333;
                    (run % 5 != 3).then(|| if i % 333 == 0 { (run % 13) as i8 } else { (run % 13) as i8 + 32 })
                })
                .collect(),
            (0..rows).map(|i| (i % 3 != 0).then(|| ((i * 7919) % 256) as u8 as i8)).collect(),
            (0..rows).map(|i| Some([i8::MIN, i8::MAX, 0, -1][i % 4])).collect(),
            // Ramps: miniblocks of one non-zero delta (bit width 0).
            (0..rows).map(|i| Some(((i % 200) as i32 - 100) as i8)).collect(),
            (0..rows).map(|i| (i % 1000 < 900).then_some((100 - (i % 200) as i32) as i8)).collect(),
            vec![None; rows],
        ];
        for version in [WriterVersion::PARQUET_1_0, WriterVersion::PARQUET_2_0] {
            for (case, codes) in cases.iter().enumerate() {
                let written = Int8Array::from(codes.clone());
                let schema = Arc::new(Schema::new(vec![Field::new("value_scale", DataType::Int8, true)]));
                let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(written.clone())]).unwrap();
                let props = props(version, Encoding::DELTA_BINARY_PACKED)
                    .set_data_page_size_limit(512)
                    .set_write_batch_size(700)
                    .set_max_row_group_row_count(Some(9_000))
                    .build();
                let mut out = Vec::new();
                let mut w = ArrowWriter::try_new(&mut out, schema, Some(props)).unwrap();
                w.write(&batch).unwrap();
                w.close().unwrap();
                let bytes = Bytes::from(out);
                let reader = ParquetRecordBatchReaderBuilder::try_new(bytes.clone()).unwrap();
                let meta = reader.metadata().clone();
                let parts: Vec<ArrayRef> = meta
                    .row_groups()
                    .iter()
                    .map(|rg| {
                        decode_delta_i8_chunk(Arc::new(bytes.clone()), rg.column(0), rg.num_rows() as usize)
                            .unwrap_or_else(|| panic!("{version:?} case {case}: declined"))
                    })
                    .collect();
                let got = arrow::compute::concat(&parts.iter().map(|a| a.as_ref()).collect::<Vec<_>>()).unwrap();
                let by_parquet: Vec<RecordBatch> = reader.build().unwrap().collect::<Result<_, _>>().unwrap();
                let by_parquet =
                    arrow::compute::concat(&by_parquet.iter().map(|b| b.column(0).as_ref()).collect::<Vec<_>>())
                        .unwrap();
                assert_eq!(got.as_ref(), by_parquet.as_ref(), "{version:?} case {case}");
                assert_eq!(got.as_ref(), &written as &dyn Array, "{version:?} case {case}");
                assert_eq!(got.null_count(), written.null_count());
            }
        }
        // Another encoding, and a stream whose header lies about its count, are declined.
        let schema = Arc::new(Schema::new(vec![Field::new("value_scale", DataType::Int8, true)]));
        let batch =
            RecordBatch::try_new(schema.clone(), vec![Arc::new(Int8Array::from(vec![Some(1i8); 300]))]).unwrap();
        let mut out = Vec::new();
        let props = WriterProperties::builder().set_dictionary_enabled(false).set_encoding(Encoding::PLAIN).build();
        let mut w = ArrowWriter::try_new(&mut out, schema, Some(props)).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let bytes = Bytes::from(out);
        let meta = ParquetRecordBatchReaderBuilder::try_new(bytes.clone()).unwrap().metadata().clone();
        assert!(decode_delta_i8_chunk(Arc::new(bytes), meta.row_group(0).column(0), 300).is_none());
        let mut values = Vec::new();
        // block 128, 4 miniblocks, 3 values claimed, first value 1 (zigzag 2), for 2 present.
        assert!(delta_values(&[128, 1, 4, 3, 2], 2, &mut values).is_none());
        // A value outside 8 bits (first value 300, zigzag 600 = 0xd8 0x04).
        assert!(delta_values(&[128, 1, 4, 1, 0xd8, 0x04], 1, &mut values).is_none());
        assert!(delta_values(&[128, 1, 4, 1, 2], 1, &mut values).is_some() && values == [1]);
    }

    #[test]
    fn join_equals_the_byte_by_byte_definition() {
        let n = 1_003;
        let want: Vec<u64> = (0..n as u64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i << 3)).collect();
        let mut data = vec![0u8; n * 8];
        for (i, v) in want.iter().enumerate() {
            for (j, b) in v.to_le_bytes().into_iter().enumerate() {
                data[j * n + i] = b;
            }
        }
        for (from, len) in [(0, n), (5, 17), (8, 8), (n - 3, 3), (0, 0), (1, 7)] {
            let mut out = vec![42];
            join_streams(&data, n, from, len, &mut out);
            assert_eq!(out[0], 42, "appends");
            assert_eq!(out[1..], want[from..from + len], "from {from} len {len}");
        }
    }

    #[test]
    fn levels_parse_rle_and_bit_packed_runs_and_reject_garbage() {
        // RLE run of 3 ones, bit-packed group 0b1010_0101, RLE run of 2 zeros.
        let bytes = [3 << 1, 1, (1 << 1) | 1, 0b1010_0101, 2 << 1, 0];
        let v = def_levels(&bytes, 13).unwrap();
        let bits: Vec<bool> = v.iter().collect();
        let mut want = vec![true; 3];
        want.extend([true, false, true, false, false, true, false, true]);
        want.extend([false, false]);
        assert_eq!(bits, want);
        // Levels other than 0 and 1, truncation and empty runs are not accepted.
        assert!(def_levels(&[2 << 1, 2], 2).is_none());
        assert!(def_levels(&[(1 << 1) | 1], 8).is_none());
        assert!(def_levels(&[0, 1], 1).is_none());
        assert!(def_levels(&[0x80; 12], 1).is_none());
    }
}
