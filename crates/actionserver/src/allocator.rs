//! How the process's allocator gives memory back, tuned for a server: glibc's malloc
//! returns the free memory at the top of its heap to the kernel once more than 128 KiB of it
//! is free, so a request that allocates and frees a few hundred KiB (a gzip stream's state
//! for every compressed gRPC message, a large tracker) pays page faults for it again on the
//! next request. Measured on the gRPC path at 10 events: 255 µs of CPU a call with the
//! default, 102 µs with this; peak RSS the same (bench/run.sh).

/// Keeps up to 64 MiB of freed memory for reuse before glibc trims its heap (`mallopt
/// M_TRIM_THRESHOLD`), and serves blocks under 32 MiB from the heap (`M_MMAP_THRESHOLD`):
/// setting the first turns off glibc's own raising of the second, without which every
/// large request body (a tracker of 10,000 events is 3.3 MiB) would be mapped and unmapped
/// afresh. Call once at start. Does nothing where the allocator is not glibc's.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const M_TRIM_THRESHOLD: libc::c_int = -1;
        const M_MMAP_THRESHOLD: libc::c_int = -3;
        // SAFETY: mallopt sets a parameter of the allocator under its own lock; it takes
        // no pointers and no memory is touched.
        #[allow(unsafe_code)]
        unsafe {
            libc::mallopt(M_TRIM_THRESHOLD, 64 << 20);
            libc::mallopt(M_MMAP_THRESHOLD, 32 << 20);
        }
    }
}
