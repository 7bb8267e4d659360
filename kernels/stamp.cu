// Kernels of the oomlens GPU runner (runner/src/kernels.rs compiles this file with NVRTC at run
// time; it is embedded in the binary).
//
// stamp:  writes `id` into every `stride`-th 8-byte word of a block when the allocator hands it
//         out (stride 1: every word; 64: the first word of every 512 bytes, which every block
//         of the caching allocator is a whole number of, so any overlap is still caught);
// check:  counts the stamped words of a block that no longer hold `id` when it is freed (a count
//         above zero means the allocator handed out overlapping memory: the replay fails loudly);
// spin:   busy-waits for `ns` nanoseconds of the GPU clock, so a replay can keep the recorded
//         gaps between events.

extern "C" __global__ void stamp(unsigned long long *p, unsigned long long words,
                                 unsigned long long stride, unsigned long long id) {
    unsigned long long n = (words + stride - 1) / stride;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         i < n; i += (unsigned long long)gridDim.x * blockDim.x) {
        p[i * stride] = id;
    }
}

extern "C" __global__ void check(const unsigned long long *p, unsigned long long words,
                                 unsigned long long stride, unsigned long long id,
                                 unsigned long long *errors) {
    unsigned long long bad = 0;
    unsigned long long n = (words + stride - 1) / stride;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         i < n; i += (unsigned long long)gridDim.x * blockDim.x) {
        if (p[i * stride] != id) {
            bad++;
        }
    }
    if (bad) {
        atomicAdd(errors, bad);
    }
}

extern "C" __global__ void spin(unsigned long long ns) {
    unsigned long long start;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    unsigned long long now = start;
    while (now - start < ns) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    }
}
