// Kernels of the oomlens GPU runner (runner/src/kernels.rs compiles this file with NVRTC at run
// time; it is embedded in the binary).
//
// stamp:  writes `id` into every 8-byte word of a block when the allocator hands it out;
// check:  counts the words of a block that no longer hold `id` when it is freed (a count above
//         zero means the allocator handed out overlapping memory: the replay fails loudly);
// spin:   busy-waits for `ns` nanoseconds of the GPU clock, so a replay can keep the recorded
//         gaps between events.

extern "C" __global__ void stamp(unsigned long long *p, unsigned long long words,
                                 unsigned long long id) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         i < words; i += (unsigned long long)gridDim.x * blockDim.x) {
        p[i] = id;
    }
}

extern "C" __global__ void check(const unsigned long long *p, unsigned long long words,
                                 unsigned long long id, unsigned long long *errors) {
    unsigned long long bad = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         i < words; i += (unsigned long long)gridDim.x * blockDim.x) {
        if (p[i] != id) {
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
