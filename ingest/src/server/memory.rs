//! The allocator's side of the memory limit: glibc malloc tunables and trimming (no-ops on
//! other platforms).
//!
//! Every write request allocates buffers of 100 KB–1 MB (decoded columns, the WAL record,
//! the rows for the write buffer) and frees them after the acknowledgement. With glibc's
//! default thresholds those go to fresh `mmap`s or are trimmed off the heap top, so the next
//! request faults them in again and the kernel zeroes every page: a quarter of the server's
//! CPU at full load (`clear_page_erms` in `perf`). Without a memory limit the server therefore
//! keeps freed memory (15–25 % more acknowledged samples/s in `benches/ingest_load.py`;
//! mimalloc as the global allocator was tried too: slower here, and a larger RSS).
//!
//! With a memory limit, memory that is kept but free still counts in the RSS the limit is
//! checked against, so the server keeps less and hands free pages back after every flush
//! (`release_free_memory`).

/// Bytes one buffered row costs (series id, time, value) plus chunk overhead.
const ROW_BYTES: u64 = 24;

/// The flush threshold for a memory limit when none is configured: the write buffer may use
/// a tenth of the limit (while it is flushed, the frozen buffer, the sorted copy and the
/// Parquet encoder's pages take about as much again).
pub fn flush_rows_for_limit(limit_bytes: u64) -> usize {
    (limit_bytes / 10 / ROW_BYTES).clamp(100_000, 4_000_000) as usize
}

/// The HTTP/2 flow-control window of one stream under a memory limit: a stream buffers at
/// most this much received data it has not read, so a thousandth of the limit (64 KiB–1 MiB;
/// without a limit hyper's default of 1 MiB applies). A larger message still arrives, in
/// window-sized steps.
pub fn h2_window_for_limit(limit_bytes: u64) -> u32 {
    (limit_bytes / 1024).clamp(64 << 10, 1 << 20) as u32
}

/// The connection window under a memory limit: four stream windows, so that one stream
/// stalled waiting for a write slot cannot block the other calls on its connection (a
/// `Stats` or `ClockSync` call next to a `WriteStream`).
pub fn h2_connection_window_for_limit(limit_bytes: u64) -> u32 {
    h2_window_for_limit(limit_bytes).saturating_mul(4)
}

/// Sets the malloc tunables for a long-running server or a scan-heavy command; call once,
/// before any thread starts.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn tune_allocator(memory_limit_bytes: Option<u64>) {
    // Without a limit keep up to 1 GiB of freed heap; with one, a sixteenth of it.
    let trim = memory_limit_bytes.map_or(1 << 30, |l| (l / 16).clamp(4 << 20, 1 << 30)) as i32;
    // SAFETY: mallopt only sets allocator tunables and has no memory-safety preconditions.
    #[allow(unsafe_code)]
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 16 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, trim);
    }
}

/// Sets the malloc tunables for a long-running server (nothing to do on this platform).
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn tune_allocator(_memory_limit_bytes: Option<u64>) {}

/// Returns free heap pages to the kernel (`malloc_trim`); takes a few milliseconds on a
/// large heap, so call it from a blocking thread.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(crate) fn release_free_memory() {
    // SAFETY: malloc_trim only releases free memory of the allocator's own arenas.
    #[allow(unsafe_code)]
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn release_free_memory() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flush_rows_scale_with_the_limit() {
        assert_eq!(flush_rows_for_limit(512 << 20), 2_236_962);
        assert_eq!(flush_rows_for_limit(1 << 20), 100_000);
        assert_eq!(flush_rows_for_limit(64 << 30), 4_000_000);
        assert_eq!(h2_window_for_limit(256 << 20), 256 << 10);
        assert_eq!(h2_window_for_limit(16 << 20), 64 << 10);
        assert_eq!(h2_window_for_limit(8 << 30), 1 << 20);
        assert_eq!(h2_connection_window_for_limit(256 << 20), 1 << 20);
    }
}
