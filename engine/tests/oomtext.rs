//! Tests of `engine::oomtext` against real text: every OOM string quoted in
//! `reference/pytorch-allocator-spec.md` section D, every traceback of the corpus (copied to
//! `tests/data/oom/`, recorded with PyTorch 2.11 on an H200), log prefixes and wrapping, several
//! messages in one log, and pathological input.
//!
//! Expected byte counts were computed once from the printed figures (exact decimal × unit, rounded
//! half up), independently of the parser; the comment beside each gives the printed figure.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use oomlens_engine::{
    DiagnosisKind, Dialect, Framework, OomMessage, looks_like_oom_log, parse_oom_log,
};

const GIB: u64 = 1 << 30;

/// Parses `text`, checks that exactly one message was found, and returns it.
fn one(text: &str) -> OomMessage {
    let all = parse_oom_log(text);
    assert_eq!(
        all.len(),
        1,
        "expected one message in {text:?}, got {all:#?}"
    );
    assert!(
        looks_like_oom_log(text),
        "looks_like_oom_log must accept {text:?}"
    );
    all.into_iter().next().unwrap()
}

// ---------------------------------------------------------------------------------------------
// Spec section D: every real string, with its numbers.

/// What a message must say; `None`/empty where the text has no such number.
#[derive(Clone, Copy)]
struct Expect {
    name: &'static str,
    text: &'static str,
    framework: Framework,
    dialect: Dialect,
    exception: Option<&'static str>,
    requested: Option<u64>,
    total: Option<u64>,
    free: Option<u64>,
    this_process: Option<u64>,
    others: &'static [(u64, u64)],
    allowed: Option<u64>,
    allocated: Option<u64>,
    private: Option<u64>,
    unallocated: Option<u64>,
    reserved: Option<u64>,
    gpu: Option<u32>,
    kind: DiagnosisKind,
}

const E: Expect = Expect {
    name: "",
    text: "",
    framework: Framework::Pytorch,
    dialect: Dialect::Torch21,
    exception: None,
    requested: None,
    total: None,
    free: None,
    this_process: None,
    others: &[],
    allowed: None,
    allocated: None,
    private: None,
    unallocated: None,
    reserved: None,
    gpu: None,
    kind: DiagnosisKind::Unknown,
};

fn check(e: &Expect) {
    let m = one(e.text);
    let n = e.name;
    assert_eq!(m.framework, e.framework, "{n}: framework");
    assert_eq!(m.dialect, e.dialect, "{n}: dialect");
    assert_eq!(m.exception.as_deref(), e.exception, "{n}: exception");
    assert_eq!(m.requested_bytes, e.requested, "{n}: requested");
    assert_eq!(m.total_capacity_bytes, e.total, "{n}: total");
    assert_eq!(m.free_bytes, e.free, "{n}: free");
    assert_eq!(m.process_in_use_bytes, e.this_process, "{n}: this process");
    let others: Vec<_> = m
        .other_processes
        .iter()
        .map(|p| (p.pid, p.in_use_bytes))
        .collect();
    assert_eq!(others, e.others, "{n}: other processes");
    assert_eq!(m.allowed_bytes, e.allowed, "{n}: allowed");
    assert_eq!(m.allocated_by_pytorch_bytes, e.allocated, "{n}: allocated");
    assert_eq!(m.private_pools_bytes, e.private, "{n}: private pools");
    assert_eq!(
        m.reserved_unallocated_bytes, e.unallocated,
        "{n}: unallocated"
    );
    assert_eq!(m.reserved_total_bytes, e.reserved, "{n}: reserved");
    assert_eq!(m.gpu_index, e.gpu, "{n}: gpu");
    assert_eq!(m.diagnosis.kind, e.kind, "{n}: {}", m.diagnosis.explanation);
    assert!(
        m.diagnosis.explanation.contains("Next:"),
        "{n}: {}",
        m.diagnosis.explanation
    );
    assert_eq!(m.line, 1, "{n}: line");
}

#[test]
fn spec_d1_pytorch_native_allocator() {
    let cases = [
        Expect {
            name: "<=1.4 (pytorch#16417)",
            text: "RuntimeError: CUDA out of memory. Tried to allocate 12.50 MiB (GPU 0; 10.92 GiB \
                   total capacity; 8.57 MiB already allocated; 9.28 GiB free; 4.68 MiB cached)",
            dialect: Dialect::Torch14,
            exception: Some("RuntimeError"),
            requested: Some(13_107_200), // 12.50 MiB
            total: Some(11_725_260_718), // 10.92 GiB
            allocated: Some(8_986_296),  // 8.57 MiB
            free: Some(9_964_324_127),   // 9.28 GiB
            reserved: Some(4_907_336),   // 4.68 MiB cached (less than allocated: as printed)
            unallocated: Some(0),        // reserved − allocated, saturating
            gpu: Some(0),
            // 9.28 GiB free for a 12.50 MiB request and no limit: no shortfall in the numbers.
            kind: DiagnosisKind::Unknown,
            ..E
        },
        Expect {
            name: "1.5-1.9 (DCRNN_PyTorch#6)",
            text: "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 5.80 GiB \
                   total capacity; 4.36 GiB already allocated; 6.69 MiB free; 4.63 GiB reserved in \
                   total by PyTorch)",
            dialect: Dialect::Torch20,
            exception: Some("RuntimeError"),
            requested: Some(20_971_520),    // 20.00 MiB
            total: Some(6_227_702_579),     // 5.80 GiB
            allocated: Some(4_681_514_353), // 4.36 GiB
            free: Some(7_014_973),          // 6.69 MiB
            reserved: Some(4_971_424_645),  // 4.63 GiB
            unallocated: Some(4_971_424_645 - 4_681_514_353),
            gpu: Some(0),
            // 276 MiB unallocated covers the 13.31 MiB shortfall with > 1% of 4.64 GiB to spare.
            kind: DiagnosisKind::Fragmentation,
            ..E
        },
        Expect {
            name: "1.10-2.0 (FastFlow#4)",
            text: "RuntimeError: CUDA out of memory. Tried to allocate 74.00 MiB (GPU 0; 11.91 GiB \
                   total capacity; 10.79 GiB already allocated; 12.94 MiB free; 11.21 GiB reserved \
                   in total by PyTorch) If reserved memory is >> allocated memory try setting \
                   max_split_size_mb to avoid fragmentation.  See documentation for Memory \
                   Management and PYTORCH_CUDA_ALLOC_CONF",
            dialect: Dialect::Torch20,
            exception: Some("RuntimeError"),
            requested: Some(77_594_624),     // 74.00 MiB
            total: Some(12_788_265_124),     // 11.91 GiB
            allocated: Some(11_585_674_281), // 10.79 GiB
            free: Some(13_568_573),          // 12.94 MiB
            reserved: Some(12_036_645_847),  // 11.21 GiB
            unallocated: Some(12_036_645_847 - 11_585_674_281),
            gpu: Some(0),
            // 430 MiB unallocated ≥ 61 MiB shortfall + 1% of 11.22 GiB.
            kind: DiagnosisKind::Fragmentation,
            ..E
        },
        Expect {
            name: "2.1 typo 'capacty' (MyGirlGPT#11)",
            text: "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 32.00 MiB. GPU \
                   0 has a total capacty of 4.00 GiB of which 41.56 MiB is free. Including \
                   non-PyTorch memory, this process has 3.44 GiB memory in use. Of the allocated \
                   memory 2.58 GiB is allocated by PyTorch, and 1.90 MiB is reserved by PyTorch but \
                   unallocated. If reserved but unallocated memory is large try setting \
                   max_split_size_mb to avoid fragmentation.  See documentation for Memory \
                   Management and PYTORCH_CUDA_ALLOC_CONF",
            exception: Some("torch.cuda.OutOfMemoryError"),
            requested: Some(33_554_432),       // 32.00 MiB
            total: Some(4_294_967_296),        // 4.00 GiB
            free: Some(43_578_819),            // 41.56 MiB
            this_process: Some(3_693_671_875), // 3.44 GiB
            allocated: Some(2_770_253_906),    // 2.58 GiB
            unallocated: Some(1_992_294),      // 1.90 MiB
            reserved: Some(2_770_253_906 + 1_992_294),
            gpu: Some(0),
            // Nearly full 4 GiB card; PyTorch (2.58 GiB) outweighs the 1.38 GiB outside its cache.
            kind: DiagnosisKind::Demand,
            ..E
        },
        Expect {
            name: "2.2-2.3 (pytorch#16417 comment)",
            text: "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 22.00 MiB. GPU \
                   0 has a total capacity of 23.65 GiB of which 11.06 MiB is free. Including \
                   non-PyTorch memory, this process has 23.60 GiB memory in use. Of the allocated \
                   memory 22.90 GiB is allocated by PyTorch, and 194.87 MiB is reserved by PyTorch \
                   but unallocated. If reserved but unallocated memory is large try setting \
                   PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See \
                   documentation for Memory Management  \
                   (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
            exception: Some("torch.cuda.OutOfMemoryError"),
            requested: Some(23_068_672),        // 22.00 MiB
            total: Some(25_393_994_138),        // 23.65 GiB
            free: Some(11_597_251),             // 11.06 MiB
            this_process: Some(25_340_307_046), // 23.60 GiB
            allocated: Some(24_588_687_770),    // 22.90 GiB
            unallocated: Some(204_336_005),     // 194.87 MiB
            reserved: Some(24_588_687_770 + 204_336_005),
            gpu: Some(0),
            // 194.87 MiB would cover the 11 MiB shortfall, but packed the card is still > 99% full.
            kind: DiagnosisKind::Demand,
            ..E
        },
        Expect {
            name: "2.4+ private pools, other process (kaito#976)",
            text: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 546.00 MiB. GPU 0 \
                   has a total capacity of 15.77 GiB of which 514.19 MiB is free. Process 562167 has \
                   15.25 GiB memory in use. Of the allocated memory 13.73 GiB is allocated by \
                   PyTorch, with 46.00 MiB allocated in private pools (e.g., CUDA Graphs), and \
                   736.86 MiB is reserved by PyTorch but unallocated. …",
            exception: Some("torch.OutOfMemoryError"),
            requested: Some(572_522_496),         // 546.00 MiB
            total: Some(16_932_908_564),          // 15.77 GiB
            free: Some(539_167_293),              // 514.19 MiB
            others: &[(562_167, 16_374_562_816)], // 15.25 GiB
            allocated: Some(14_742_475_244),      // 13.73 GiB
            private: Some(48_234_496),            // 46.00 MiB
            unallocated: Some(772_653_711),       // 736.86 MiB
            reserved: Some(14_742_475_244 + 772_653_711),
            gpu: Some(0),
            // 736.86 MiB unallocated ≥ the 546 MiB request itself.
            kind: DiagnosisKind::Fragmentation,
            ..E
        },
        Expect {
            name: "2.11 exact, 200 GiB on an H200",
            text: "CUDA out of memory. Tried to allocate 200.00 GiB. GPU 0 has a total capacity of \
                   139.80 GiB of which 139.28 GiB is free. Including non-PyTorch memory, this \
                   process has 520.00 MiB memory in use. Of the allocated memory 512 bytes is \
                   allocated by PyTorch, and 2.00 MiB is reserved by PyTorch but unallocated. If \
                   reserved …",
            requested: Some(214_748_364_800), // 200.00 GiB
            total: Some(150_109_106_995),     // 139.80 GiB
            free: Some(149_550_761_247),      // 139.28 GiB
            this_process: Some(545_259_520),  // 520.00 MiB
            allocated: Some(512),             // 512 bytes
            unallocated: Some(2_097_152),     // 2.00 MiB
            reserved: Some(512 + 2_097_152),
            gpu: Some(0),
            // The request is larger than the whole card.
            kind: DiagnosisKind::Demand,
            ..E
        },
        Expect {
            name: "2.11 exact, with a fraction (quoted from mid-message)",
            text: "…this process has 3.50 GiB memory in use. 3.00 GiB allowed; Of the allocated \
                   memory 2.59 GiB is allocated by PyTorch, and 339.62 MiB is reserved by PyTorch \
                   but unallocated. …",
            this_process: Some(3_758_096_384), // 3.50 GiB
            allowed: Some(3_221_225_472),      // 3.00 GiB
            allocated: Some(2_780_991_324),    // 2.59 GiB
            unallocated: Some(356_117_381),    // 339.62 MiB
            reserved: Some(2_780_991_324 + 356_117_381),
            // Neither the request nor the device's free memory is in the quote.
            kind: DiagnosisKind::Unknown,
            ..E
        },
        Expect {
            name: "ROCm, as the spec wraps it (amd-strix-halo#3)",
            text: "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 3.31 GiB. GPU 0 has a total capacity of 128.00 GiB of\n\
                   which 780.24 MiB is free. Of the allocated memory 57.70 GiB is allocated by PyTorch, and 75.82 MiB is reserved by\n\
                   PyTorch but unallocated. If reserved but unallocated memory is large try setting\n\
                   PYTORCH_HIP_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management\n\
                   (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
            framework: Framework::PytorchHip,
            exception: Some("torch.OutOfMemoryError"),
            requested: Some(3_554_085_437),  // 3.31 GiB
            total: Some(137_438_953_472),    // 128.00 GiB
            free: Some(818_140_938),         // 780.24 MiB
            allocated: Some(61_954_903_245), // 57.70 GiB
            unallocated: Some(79_503_032),   // 75.82 MiB
            reserved: Some(61_954_903_245 + 79_503_032),
            gpu: Some(0),
            // 69.46 GiB of the 128 GiB (an APU's shared memory) is held outside PyTorch's 57.77
            // GiB.
            kind: DiagnosisKind::OtherProcesses,
            ..E
        },
        Expect {
            name: "ROCm, fraction and HIP Graphs (TheRock#2118, quoted from mid-message)",
            text: "…GPU 0 has a total capacity of 287.98 GiB of which 275.86 GiB is free. 1.05 GiB allowed;\n\
                   Of the allocated memory 1017.01 MiB is allocated by PyTorch, with 17.00 MiB allocated in private pools (e.g., HIP\n\
                   Graphs), and 54.99 MiB is reserved by PyTorch but unallocated. …",
            framework: Framework::PytorchHip,
            total: Some(309_216_170_476),   // 287.98 GiB
            free: Some(296_202_419_569),    // 275.86 GiB
            allowed: Some(1_127_428_915),   // 1.05 GiB
            allocated: Some(1_066_412_278), // 1017.01 MiB
            private: Some(17_825_792),      // 17.00 MiB
            unallocated: Some(57_661_194),  // 54.99 MiB
            reserved: Some(1_066_412_278 + 57_661_194),
            gpu: Some(0),
            // 275.86 GiB free, more than the whole 1.05 GiB limit: the limit failed.
            kind: DiagnosisKind::Limit,
            ..E
        },
        Expect {
            name: "more than 1EB",
            text: "CUDA out of memory. Tried to allocate more than 1EB memory.",
            dialect: Dialect::TorchMoreThan1Eb,
            kind: DiagnosisKind::Demand,
            ..E
        },
        Expect {
            name: "2.15 preemptive rejection (size elided in the spec)",
            text: "CUDA out of memory. Allocation was preemptively rejected because it would exceed \
                   per_process_memory_fraction limit. Requested size: …",
            dialect: Dialect::TorchPreemptiveLimit,
            kind: DiagnosisKind::Limit,
            ..E
        },
    ];
    for e in &cases {
        check(e);
    }
}

#[test]
fn spec_d2_other_pytorch_paths() {
    let cases = [
        Expect {
            name: "cudaMallocAsync, 2.11",
            text: "torch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory)\n\
                   Currently allocated     : 0 bytes\n\
                   Requested               : 200.00 GiB\n\
                   Device limit            : 139.80 GiB\n\
                   Free (according to CUDA): 31.12 MiB\n\
                   PyTorch limit (set by user-supplied memory fraction)\n\
                   \x20                       : 17179869184.00 GiB\n",
            framework: Framework::PytorchCudaMallocAsync,
            dialect: Dialect::CudaMallocAsync,
            exception: Some("torch.OutOfMemoryError"),
            allocated: Some(0),
            requested: Some(214_748_364_800), // 200.00 GiB
            total: Some(150_109_106_995),     // 139.80 GiB
            free: Some(32_631_685),           // 31.12 MiB
            reserved: None,
            allowed: None, // the "no limit" sentinel
            gpu: Some(0),
            kind: DiagnosisKind::Demand,
            ..E
        },
        Expect {
            name: "cudaMallocAsync, ComfyUI one-liner",
            text: "torch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory)",
            framework: Framework::PytorchCudaMallocAsync,
            dialect: Dialect::CudaMallocAsync,
            exception: Some("torch.OutOfMemoryError"),
            gpu: Some(0),
            kind: DiagnosisKind::Unknown,
            ..E
        },
        Expect {
            name: "caching disabled, 2.11",
            text: "torch.AcceleratorError: CUDA error: out of memory\n\
                   Search for `cudaErrorMemoryAllocation' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.\n\
                   CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\n\
                   For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n\
                   Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n",
            framework: Framework::PytorchCudaError,
            dialect: Dialect::CudaError,
            exception: Some("torch.AcceleratorError"),
            kind: DiagnosisKind::Unknown,
            ..E
        },
        Expect {
            name: "older versions",
            text: "RuntimeError: CUDA error: out of memory",
            framework: Framework::PytorchCudaError,
            dialect: Dialect::CudaError,
            exception: Some("RuntimeError"),
            kind: DiagnosisKind::Unknown,
            ..E
        },
        Expect {
            name: "cuBLAS",
            text: "CUBLAS_STATUS_ALLOC_FAILED",
            framework: Framework::PytorchCudaError,
            dialect: Dialect::CublasAllocFailed,
            kind: DiagnosisKind::Unknown,
            ..E
        },
        Expect {
            name: "TF/XLA driver log",
            text: "failed to allocate 17.79G (19104890880 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory",
            framework: Framework::Jax,
            dialect: Dialect::XlaStreamExecutor,
            requested: Some(19_104_890_880), // the exact count, not 17.79G
            kind: DiagnosisKind::Demand,
            ..E
        },
    ];
    for e in &cases {
        check(e);
    }
    // Other libraries' texts the spec quotes are not PyTorch/JAX/TensorFlow messages: not read.
    for text in [
        "cudaMalloc failed: out of memory",       // MXNet
        "cuda failed with error 2 out of memory", // spconv
    ] {
        assert!(parse_oom_log(text).is_empty(), "{text}");
    }
}

#[test]
fn spec_d3_jax_xla() {
    let xla = Expect {
        framework: Framework::Jax,
        dialect: Dialect::XlaWhileTryingToAllocate,
        kind: DiagnosisKind::Demand,
        ..E
    };
    let cases = [
        Expect {
            name: "jax 0.11.2",
            text: "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate \
                   200.00GiB with allocator GPU_0_bfc on device 0. [executable_name='jit_broadcast_in_dim'] \
                   [tf-allocator-allocation-error='']",
            exception: Some("jax.errors.JaxRuntimeError"),
            requested: Some(214_748_364_800), // 200.00GiB
            gpu: Some(0),
            ..xla
        },
        Expect {
            // The spec elides the middle ("… 335.28GiB …"); filled in from the first run's
            // template.
            name: "jax 0.11.2, tags in the other order",
            text: "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 335.28GiB with allocator \
                   GPU_0_bfc on device 0. [tf-allocator-allocation-error=''] [executable_name='jit__lambda']",
            requested: Some(360_004_158_751), // 335.28GiB
            gpu: Some(0),
            ..xla
        },
        Expect {
            name: "2022-2024 (alphafold#1023)",
            text: "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying \
                   to allocate 7406166528 bytes.",
            exception: Some("jaxlib.xla_extension.XlaRuntimeError"),
            requested: Some(7_406_166_528),
            ..xla
        },
        Expect {
            name: "allocating (LLNeRF#9)",
            text: "RESOURCE_EXHAUSTED: Out of memory allocating 20029400304 bytes.",
            dialect: Dialect::XlaAllocating,
            requested: Some(20_029_400_304),
            ..xla
        },
        Expect {
            name: "request (graphcast#18)",
            text: "RESOURCE_EXHAUSTED: Failed to allocate request for 2.99GiB (3206250496B) on device ordinal 0",
            dialect: Dialect::XlaFailedToAllocateRequest,
            requested: Some(3_206_250_496), // the exact count, not 2.99GiB
            gpu: Some(0),
            ..xla
        },
        Expect {
            name: "<=2021 (ColabFold#65)",
            text: "RuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 14285187448 bytes.",
            exception: Some("RuntimeError"),
            requested: Some(14_285_187_448),
            ..xla
        },
        Expect {
            name: "<=2021 (jax#4994)",
            text: "RuntimeError: Resource exhausted: Out of memory while trying to allocate 24 bytes.",
            exception: Some("RuntimeError"),
            requested: Some(24),
            ..xla
        },
        Expect {
            name: "TPU compile (pytorch/xla#9524)",
            text: "RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space vmem.",
            dialect: Dialect::XlaTpuCompile,
            ..xla
        },
    ];
    for e in &cases {
        check(e);
    }

    // The BFC allocator's warning lines are about the same event: alone they are no message, and
    // with the error they add none.
    let bfc = "W0000 00:00:1712345678.123456  12345 bfc_allocator.cc:598] Allocator (GPU_0_bfc) ran out of \
               memory trying to allocate 200.00GiB (rounded to 214748364800) from the lower end requested by op\n\
               If this is caused by memory fragmentation, the environment variable \
               'TF_GPU_ALLOCATOR=cuda_malloc_async' may improve the situation.\n\
               Current allocation summary follows.\n*___________________________\n";
    assert!(parse_oom_log(bfc).is_empty());
    let with_error = format!("{bfc}{}\n", cases[0].text);
    assert_eq!(one(&with_error).line, 5);

    // BufferAssignment statistics after the message (jax#13428) are not read as messages.
    let stats = "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying \
                 to allocate 7406166528 bytes.\nBufferAssignment OOM Debugging.\nBufferAssignment stats:\n \
                 parameter allocation: 6.00MiB\n total allocation: 12.00MiB\n total fragmentation: 0B \
                 (0.00%)\nPeak buffers:\n Buffer 1:\n Size: 6.00MiB\n Operator: op_name=\"x\"\n XLA \
                 Label: concatenate\n Shape: f32[4096,128,3]\n";
    assert_eq!(one(stats).requested_bytes, Some(7_406_166_528));
}

#[test]
fn spec_d4_tensorflow() {
    let tf = Expect {
        framework: Framework::Tensorflow,
        dialect: Dialect::TfOomWhenAllocating,
        exception: Some("ResourceExhaustedError"),
        kind: DiagnosisKind::Demand,
        ..E
    };
    let cases = [
        Expect {
            name: "TF 1.x graph mode (tensorflow#136)",
            text: "ResourceExhaustedError (see above for traceback): OOM when allocating tensor with \
                   shape[128,3,8,128,8,128] and type float on \
                   /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n\
                   \t [[node conv/Conv2D (defined at train.py:12) ]]\n\
                   Hint: If you want to see a list of allocated tensors when OOM happens, add \
                   report_tensor_allocations_upon_oom to RunOptions for current allocation info.\n",
            requested: Some(1_610_612_736), // 128·3·8·128·8·128 floats × 4 bytes
            gpu: Some(0),
            ..tf
        },
        Expect {
            name: "TF 1.x two root errors (MachineLearningNotebooks#880)",
            text: "ResourceExhaustedError: 2 root error(s) found.\n  (0) Resource exhausted: OOM when \
                   allocating tensor with shape[16,112,112,147] and type float on \
                   /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
            requested: Some(118_013_952), // 16·112·112·147 × 4
            gpu: Some(0),
            ..tf
        },
        Expect {
            name: "very old (text-classification-models-tf#4)",
            text: "OOM when allocating tensor of shape [563354,256] and type float",
            exception: None,
            requested: Some(576_874_496), // 563354·256 × 4
            ..tf
        },
        Expect {
            // The spec gives the template with "…"; a concrete shape and op are filled in.
            name: "TF 2.x eager",
            text: "tensorflow.python.framework.errors_impl.ResourceExhaustedError: {{function_node \
                   __wrapped__AddV2_device_/job:localhost/replica:0/task:0/device:GPU:0}} OOM when \
                   allocating tensor with shape[1024,1024,256] and type half on \
                   /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc [Op:AddV2]",
            exception: Some("tensorflow.python.framework.errors_impl.ResourceExhaustedError"),
            requested: Some(536_870_912), // 1024·1024·256 halves × 2
            gpu: Some(0),
            ..tf
        },
    ];
    for e in &cases {
        let first_line_only =
            e.text.lines().count() == 1 || !e.text.starts_with("ResourceExhaustedError:");
        if first_line_only {
            check(e);
        } else {
            // The message is on line 2, under its exception line.
            let m = one(e.text);
            assert_eq!(m.line, 2);
            assert_eq!(m.exception.as_deref(), e.exception);
            assert_eq!(m.requested_bytes, e.requested);
            assert_eq!(m.diagnosis.kind, e.kind);
        }
    }
    let m = one(cases[0].text);
    assert_eq!(
        m.tensor_shape.as_deref(),
        Some(&[128, 3, 8, 128, 8, 128][..])
    );
    assert_eq!(m.dtype.as_deref(), Some("float"));
    assert!(m.text.ends_with("by allocator GPU_0_bfc"), "{}", m.text);
}

// ---------------------------------------------------------------------------------------------
// The corpus: 26 tracebacks of real OOMs (PyTorch 2.11, H200 with a per-process cap).

struct Row {
    id: &'static str,
    text: &'static str,
    /// Line of the message (after the traceback).
    line: usize,
    requested: u64,
    total: u64,
    free: u64,
    this_process: u64,
    others: &'static [(u64, u64)],
    allowed: u64,
    /// truth.json's `cap_bytes` for this run, rounded to a byte; `allowed` must be within the
    /// printed rounding (0.005 GiB) of it.
    cap: u64,
    allocated: u64,
    unallocated: u64,
    frames: usize,
    /// (file, line, function) of the innermost frame.
    innermost: (&'static str, u32, &'static str),
    kind: DiagnosisKind,
    /// Why that kind, with the corpus evidence (truth.json's remedy runs).
    #[allow(dead_code)]
    reason: &'static str,
}

use DiagnosisKind::{Fragmentation, Limit};

const CORPUS: &[Row] = &[
    Row {
        id: "gpt__amp_bf16__cap10",
        text: include_str!("data/oom/gpt__amp_bf16__cap10.txt"),
        line: 11,
        requested: 1_048_576_000,     // 1000.00 MiB
        total: 150_109_106_995,       // 139.80 GiB
        free: 111_658_412_278,        // 103.99 GiB
        this_process: 10_522_669_875, // 9.80 GiB
        others: &[
            (969, 11_306_501_407),
            (988, 1_814_623_683),
            (989, 11_295_763_988),
            (986, 3_532_610_601),
        ],
        allowed: 10_737_418_240,  // 10.00 GiB
        cap: 10_737_418_240,      // truth.json cap_bytes 10737418240
        allocated: 9_395_240_960, // 8.75 GiB
        unallocated: 338_165_760, // 322.50 MiB
        frames: 4,
        innermost: (
            "/opt/torch/.venv/lib/python3.12/site-packages/torch/autograd/graph.py",
            869,
            "_engine_run_backward",
        ),
        kind: Fragmentation,
        reason: "the full amp run peaks at 9.72 GiB allocated but 10.04 GiB reserved: the cap lies between; allocated + request = 9.73 GiB fits",
    },
    Row {
        id: "gpt__amp_fp16__cap10",
        text: include_str!("data/oom/gpt__amp_fp16__cap10.txt"),
        line: 11,
        requested: 1_048_576_000,     // 1000.00 MiB
        total: 150_109_106_995,       // 139.80 GiB
        free: 109_038_482_227,        // 101.55 GiB
        this_process: 10_522_669_875, // 9.80 GiB
        others: &[
            (868, 8_922_794_557),
            (869, 8_922_794_557),
            (870, 6_335_076_762),
            (931, 6_335_076_762),
        ],
        allowed: 10_737_418_240,  // 10.00 GiB
        cap: 10_737_418_240,      // truth.json cap_bytes 10737418240
        allocated: 9_395_240_960, // 8.75 GiB
        unallocated: 338_165_760, // 322.50 MiB
        frames: 4,
        innermost: (
            "/opt/torch/.venv/lib/python3.12/site-packages/torch/autograd/graph.py",
            869,
            "_engine_run_backward",
        ),
        kind: Fragmentation,
        reason: "as amp_bf16: peak allocated 9.72 GiB < 10 GiB cap < peak reserved 10.04 GiB",
    },
    Row {
        id: "gpt__baseline__cap10",
        text: include_str!("data/oom/gpt__baseline__cap10.txt"),
        line: 11,
        requested: 1_048_576_000,     // 1000.00 MiB
        total: 150_109_106_995,       // 139.80 GiB
        free: 116_339_926_630,        // 108.35 GiB
        this_process: 11_295_763_988, // 10.52 GiB
        others: &[
            (768, 6_979_321_856),
            (769, 6_979_321_856),
            (767, 1_428_076_626),
            (766, 7_054_483_784),
        ],
        allowed: 10_737_418_240,   // 10.00 GiB
        cap: 10_737_418_240,       // truth.json cap_bytes 10737418240
        allocated: 10_587_094_385, // 9.86 GiB
        unallocated: 784_896,      // 766.50 KiB
        frames: 4,
        innermost: (
            "/opt/torch/.venv/lib/python3.12/site-packages/torch/autograd/graph.py",
            869,
            "_engine_run_backward",
        ),
        kind: Limit,
        reason: "the run needs 12.51 GiB allocated; 9.86 GiB + 1000 MiB > 10 GiB allowed with 108 GiB free on the card",
    },
    Row {
        id: "gpt__baseline__tight12.76",
        text: include_str!("data/oom/gpt__baseline__tight12.76.txt"),
        line: 11,
        requested: 1_048_576_000,     // 1000.00 MiB
        total: 150_109_106_995,       // 139.80 GiB
        free: 49_703_509_033,         // 46.29 GiB
        this_process: 13_464_722_473, // 12.54 GiB
        others: &[
            (4045, 15_000_173_281),
            (4037, 14_355_928_187),
            (4034, 14_312_978_514),
            (4046, 14_312_978_514),
            (4043, 14_527_726_879),
            (4041, 14_377_403_023),
        ],
        allowed: 13_700_945_674,   // 12.76 GiB
        cap: 13_700_945_674,       // truth.json cap_bytes 13700945674.24
        allocated: 12_380_243_231, // 11.53 GiB
        unallocated: 299_378_934,  // 285.51 MiB
        frames: 4,
        innermost: (
            "/opt/torch/.venv/lib/python3.12/site-packages/torch/autograd/graph.py",
            869,
            "_engine_run_backward",
        ),
        kind: Fragmentation,
        reason: "cap between peak allocated (12.51) and reserved (12.81); the expandable_segments run at 12.76 completes",
    },
    Row {
        id: "gpt__expandable_segments__cap10",
        text: include_str!("data/oom/gpt__expandable_segments__cap10.txt"),
        line: 11,
        requested: 1_048_576_000,     // 1000.00 MiB
        total: 150_109_106_995,       // 139.80 GiB
        free: 133_047_349_412,        // 123.91 GiB
        this_process: 11_306_501_407, // 10.53 GiB
        others: &[
            (985, 1_428_076_626),
            (988, 1_428_076_626),
            (989, 1_428_076_626),
            (986, 1_428_076_626),
        ],
        allowed: 10_737_418_240,   // 10.00 GiB
        cap: 10_737_418_240,       // truth.json cap_bytes 10737418240
        allocated: 10_576_356_966, // 9.85 GiB
        unallocated: 19_660_800,   // 18.75 MiB
        frames: 4,
        innermost: (
            "/opt/torch/.venv/lib/python3.12/site-packages/torch/autograd/graph.py",
            869,
            "_engine_run_backward",
        ),
        kind: Limit,
        reason: "18.75 MiB unallocated; 9.85 GiB + 1000 MiB > 10 GiB: the work, not packing",
    },
    Row {
        id: "gpt__gc_threshold_06__cap10",
        text: include_str!("data/oom/gpt__gc_threshold_06__cap10.txt"),
        line: 11,
        requested: 1_048_576_000,     // 1000.00 MiB
        total: 150_109_106_995,       // 139.80 GiB
        free: 114_568_252_621,        // 106.70 GiB
        this_process: 11_295_763_988, // 10.52 GiB
        others: &[
            (969, 11_306_501_407),
            (985, 9_470_402_888),
            (988, 1_610_612_736),
            (986, 1_814_623_683),
        ],
        allowed: 10_737_418_240,   // 10.00 GiB
        cap: 10_737_418_240,       // truth.json cap_bytes 10737418240
        allocated: 10_587_094_385, // 9.86 GiB
        unallocated: 784_896,      // 766.50 KiB
        frames: 4,
        innermost: (
            "/opt/torch/.venv/lib/python3.12/site-packages/torch/autograd/graph.py",
            869,
            "_engine_run_backward",
        ),
        kind: Limit,
        reason: "same numbers as the baseline: 766.50 KiB unallocated, 9.86 GiB + 1000 MiB > 10 GiB",
    },
    Row {
        id: "gpt__max_split_128__cap10",
        text: include_str!("data/oom/gpt__max_split_128__cap10.txt"),
        line: 11,
        requested: 1_048_576_000,     // 1000.00 MiB
        total: 150_109_106_995,       // 139.80 GiB
        free: 106_708_462_469,        // 99.38 GiB
        this_process: 11_295_763_988, // 10.52 GiB
        others: &[
            (985, 10_522_669_875),
            (988, 10_264_971_837),
            (989, 11_295_763_988),
        ],
        allowed: 10_737_418_240,   // 10.00 GiB
        cap: 10_737_418_240,       // truth.json cap_bytes 10737418240
        allocated: 10_587_094_385, // 9.86 GiB
        unallocated: 784_896,      // 766.50 KiB
        frames: 4,
        innermost: (
            "/opt/torch/.venv/lib/python3.12/site-packages/torch/autograd/graph.py",
            869,
            "_engine_run_backward",
        ),
        kind: Limit,
        reason: "same numbers as the baseline",
    },
    Row {
        id: "gpt__roundup_pow2_4__tight12.76",
        text: include_str!("data/oom/gpt__roundup_pow2_4__tight12.76.txt"),
        line: 11,
        requested: 1_073_741_824,     // 1024.00 MiB
        total: 150_109_106_995,       // 139.80 GiB
        free: 41_070_624_768,         // 38.25 GiB
        this_process: 13_593_571_492, // 12.66 GiB
        others: &[
            (4033, 12_433_930_322),
            (4045, 15_000_173_281),
            (4037, 14_398_877_860),
            (4034, 14_312_978_514),
            (4046, 12_433_930_322),
            (4043, 12_433_930_322),
            (4041, 14_377_403_023),
        ],
        allowed: 13_700_945_674,   // 12.76 GiB
        cap: 13_700_945_674,       // truth.json cap_bytes 13700945674.24
        allocated: 12_476_879_995, // 11.62 GiB
        unallocated: 337_117_184,  // 321.50 MiB
        frames: 4,
        innermost: (
            "/opt/torch/.venv/lib/python3.12/site-packages/torch/autograd/graph.py",
            869,
            "_engine_run_backward",
        ),
        kind: Fragmentation,
        reason: "this config peaks at 12.62 GiB allocated (its tight13.26 run) < 12.76 cap < 12.95 reserved",
    },
    Row {
        id: "gpt__sgd__cap10",
        text: include_str!("data/oom/gpt__sgd__cap10.txt"),
        line: 11,
        requested: 1_048_576_000,     // 1000.00 MiB
        total: 150_109_106_995,       // 139.80 GiB
        free: 133_047_349_412,        // 123.91 GiB
        this_process: 11_295_763_988, // 10.52 GiB
        others: &[
            (1089, 1_428_076_626),
            (1071, 1_428_076_626),
            (1120, 1_428_076_626),
            (1121, 1_449_551_462),
        ],
        allowed: 10_737_418_240,   // 10.00 GiB
        cap: 10_737_418_240,       // truth.json cap_bytes 10737418240
        allocated: 10_587_094_385, // 9.86 GiB
        unallocated: 784_896,      // 766.50 KiB
        frames: 4,
        innermost: (
            "/opt/torch/.venv/lib/python3.12/site-packages/torch/autograd/graph.py",
            869,
            "_engine_run_backward",
        ),
        kind: Limit,
        reason: "SGD needs 11.69 GiB allocated; 9.86 GiB + 1000 MiB > 10 GiB",
    },
    Row {
        id: "hf_gpt2__amp_bf16__cap11",
        text: include_str!("data/oom/hf_gpt2__amp_bf16__cap11.txt"),
        line: 11,
        requested: 1_653_562_409,     // 1.54 GiB
        total: 150_109_106_995,       // 139.80 GiB
        free: 138_598_594_642,        // 129.08 GiB
        this_process: 11_499_774_935, // 10.71 GiB
        others: &[],
        allowed: 11_811_160_064,   // 11.00 GiB
        cap: 11_811_160_064,       // truth.json cap_bytes 11811160064
        allocated: 10_630_044_058, // 9.90 GiB
        unallocated: 160_253_870,  // 152.83 MiB
        frames: 4,
        innermost: (
            "/opt/torch/.venv/lib/python3.12/site-packages/torch/autograd/graph.py",
            869,
            "_engine_run_backward",
        ),
        kind: Limit,
        reason: "9.90 GiB + 1.54 GiB > 11 GiB; only 152.83 MiB unallocated",
    },
    Row {
        id: "hf_gpt2__amp_fp16__cap11",
        text: include_str!("data/oom/hf_gpt2__amp_fp16__cap11.txt"),
        line: 11,
        requested: 1_653_562_409,     // 1.54 GiB
        total: 150_109_106_995,       // 139.80 GiB
        free: 138_598_594_642,        // 129.08 GiB
        this_process: 11_499_774_935, // 10.71 GiB
        others: &[],
        allowed: 11_811_160_064,   // 11.00 GiB
        cap: 11_811_160_064,       // truth.json cap_bytes 11811160064
        allocated: 10_630_044_058, // 9.90 GiB
        unallocated: 160_253_870,  // 152.83 MiB
        frames: 4,
        innermost: (
            "/opt/torch/.venv/lib/python3.12/site-packages/torch/autograd/graph.py",
            869,
            "_engine_run_backward",
        ),
        kind: Limit,
        reason: "as amp_bf16",
    },
    Row {
        id: "hf_gpt2__baseline__cap11",
        text: include_str!("data/oom/hf_gpt2__baseline__cap11.txt"),
        line: 29,
        requested: 1_653_562_409,     // 1.54 GiB
        total: 150_109_106_995,       // 139.80 GiB
        free: 138_469_745_623,        // 128.96 GiB
        this_process: 11_628_623_954, // 10.83 GiB
        others: &[],
        allowed: 11_811_160_064,   // 11.00 GiB
        cap: 11_811_160_064,       // truth.json cap_bytes 11811160064
        allocated: 10_844_792_422, // 10.10 GiB
        unallocated: 67_895_296,   // 64.75 MiB
        frames: 9,
        innermost: (
            "/opt/torch/.venv/lib/python3.12/site-packages/torch/nn/functional.py",
            3504,
            "cross_entropy",
        ),
        kind: Limit,
        reason: "the run needs 14.13 GiB allocated; 10.10 GiB + 1.54 GiB > 11 GiB",
    },
    Row {
        id: "hf_gpt2__baseline__tight14.41",
        text: include_str!("data/oom/hf_gpt2__baseline__tight14.41.txt"),
        line: 11,
        requested: 1_653_562_409,     // 1.54 GiB
        total: 150_109_106_995,       // 139.80 GiB
        free: 135_205_570_478,        // 125.92 GiB
        this_process: 14_892_799_099, // 13.87 GiB
        others: &[],
        allowed: 15_472_619_684,   // 14.41 GiB
        cap: 15_472_619_684,       // truth.json cap_bytes 15472619683.84
        allocated: 13_529_146_982, // 12.60 GiB
        unallocated: 590_285_373,  // 562.94 MiB
        frames: 4,
        innermost: (
            "/opt/torch/.venv/lib/python3.12/site-packages/torch/autograd/graph.py",
            869,
            "_engine_run_backward",
        ),
        kind: Fragmentation,
        reason: "cap between peak allocated (14.13) and reserved (14.82); the expandable_segments run at 14.41 completes",
    },
    Row {
        id: "hf_gpt2__expandable_segments__cap11",
        text: include_str!("data/oom/hf_gpt2__expandable_segments__cap11.txt"),
        line: 29,
        requested: 1_653_562_409,     // 1.54 GiB
        total: 150_109_106_995,       // 139.80 GiB
        free: 130_395_207_107,        // 121.44 GiB
        this_process: 11_585_674_281, // 10.79 GiB
        others: &[(3539, 8_106_750_771)],
        allowed: 11_811_160_064,   // 11.00 GiB
        cap: 11_811_160_064,       // truth.json cap_bytes 11811160064
        allocated: 10_844_792_422, // 10.10 GiB
        unallocated: 22_554_870,   // 21.51 MiB
        frames: 9,
        innermost: (
            "/opt/torch/.venv/lib/python3.12/site-packages/torch/nn/functional.py",
            3504,
            "cross_entropy",
        ),
        kind: Limit,
        reason: "10.10 GiB + 1.54 GiB > 11 GiB; 21.51 MiB unallocated",
    },
    Row {
        id: "hf_gpt2__gc_threshold_06__cap11",
        text: include_str!("data/oom/hf_gpt2__gc_threshold_06__cap11.txt"),
        line: 29,
        requested: 1_653_562_409,     // 1.54 GiB
        total: 150_109_106_995,       // 139.80 GiB
        free: 121_150_290_002,        // 112.83 GiB
        this_process: 11_628_623_954, // 10.83 GiB
        others: &[(3685, 17_319_455_621)],
        allowed: 11_811_160_064,   // 11.00 GiB
        cap: 11_811_160_064,       // truth.json cap_bytes 11811160064
        allocated: 10_844_792_422, // 10.10 GiB
        unallocated: 67_895_296,   // 64.75 MiB
        frames: 9,
        innermost: (
            "/opt/torch/.venv/lib/python3.12/site-packages/torch/nn/functional.py",
            3504,
            "cross_entropy",
        ),
        kind: Limit,
        reason: "10.10 GiB + 1.54 GiB > 11 GiB",
    },
    Row {
        id: "hf_gpt2__max_split_128__cap11",
        text: include_str!("data/oom/hf_gpt2__max_split_128__cap11.txt"),
        line: 29,
        requested: 1_653_562_409,     // 1.54 GiB
        total: 150_109_106_995,       // 139.80 GiB
        free: 127_721_589_965,        // 118.95 GiB
        this_process: 11_628_623_954, // 10.83 GiB
        others: &[(3583, 10_748_155_658)],
        allowed: 11_811_160_064,   // 11.00 GiB
        cap: 11_811_160_064,       // truth.json cap_bytes 11811160064
        allocated: 10_855_529_841, // 10.11 GiB
        unallocated: 66_353_889,   // 63.28 MiB
        frames: 9,
        innermost: (
            "/opt/torch/.venv/lib/python3.12/site-packages/torch/nn/functional.py",
            3504,
            "cross_entropy",
        ),
        kind: Limit,
        reason: "10.11 GiB + 1.54 GiB > 11 GiB",
    },
    Row {
        id: "hf_gpt2__roundup_pow2_4__tight14.41",
        text: include_str!("data/oom/hf_gpt2__roundup_pow2_4__tight14.41.txt"),
        line: 11,
        requested: 1_879_048_192,     // 1.75 GiB
        total: 150_109_106_995,       // 139.80 GiB
        free: 133_208_410_685,        // 124.06 GiB
        this_process: 15_816_217_068, // 14.73 GiB
        others: &[(5184, 14_680_064), (5250, 1_056_964_608)],
        allowed: 15_472_619_684,   // 14.41 GiB
        cap: 15_472_619_684,       // truth.json cap_bytes 15472619683.84
        allocated: 14_237_816_586, // 13.26 GiB
        unallocated: 801_049_149,  // 763.94 MiB
        frames: 4,
        innermost: (
            "/opt/torch/.venv/lib/python3.12/site-packages/torch/autograd/graph.py",
            869,
            "_engine_run_backward",
        ),
        kind: Limit,
        reason: "13.26 GiB allocated + 1.75 GiB > 14.41 GiB even perfectly packed",
    },
    Row {
        id: "hf_gpt2__roundup_pow2_4__tight14.98",
        text: include_str!("data/oom/hf_gpt2__roundup_pow2_4__tight14.98.txt"),
        line: 11,
        requested: 1_879_048_192,     // 1.75 GiB
        total: 150_109_106_995,       // 139.80 GiB
        free: 116_683_524_014,        // 108.67 GiB
        this_process: 15_816_217_068, // 14.73 GiB
        others: &[(5341, 16_192_026_706), (5429, 1_406_601_789)],
        allowed: 16_084_652_524,   // 14.98 GiB
        cap: 16_084_652_524,       // truth.json cap_bytes 16084652523.52
        allocated: 14_237_816_586, // 13.26 GiB
        unallocated: 801_049_149,  // 763.94 MiB
        frames: 4,
        innermost: (
            "/opt/torch/.venv/lib/python3.12/site-packages/torch/autograd/graph.py",
            869,
            "_engine_run_backward",
        ),
        kind: Limit,
        reason: "13.26 GiB + 1.75 GiB = 15.01 GiB > 14.98 GiB even perfectly packed",
    },
    Row {
        id: "hf_gpt2__sgd__cap11",
        text: include_str!("data/oom/hf_gpt2__sgd__cap11.txt"),
        line: 29,
        requested: 1_653_562_409,     // 1.54 GiB
        total: 150_109_106_995,       // 139.80 GiB
        free: 138_469_745_623,        // 128.96 GiB
        this_process: 11_628_623_954, // 10.83 GiB
        others: &[],
        allowed: 11_811_160_064,   // 11.00 GiB
        cap: 11_811_160_064,       // truth.json cap_bytes 11811160064
        allocated: 10_844_792_422, // 10.10 GiB
        unallocated: 67_895_296,   // 64.75 MiB
        frames: 9,
        innermost: (
            "/opt/torch/.venv/lib/python3.12/site-packages/torch/nn/functional.py",
            3504,
            "cross_entropy",
        ),
        kind: Limit,
        reason: "the SGD run needs 13.67 GiB allocated; 10.10 GiB + 1.54 GiB > 11 GiB",
    },
    Row {
        id: "resnet50__baseline__cap10",
        text: include_str!("data/oom/resnet50__baseline__cap10.txt"),
        line: 50,
        requested: 52_428_800,        // 50.00 MiB
        total: 150_109_106_995,       // 139.80 GiB
        free: 137_310_104_453,        // 127.88 GiB
        this_process: 11_360_188_498, // 10.58 GiB
        others: &[(1945, 1_428_076_626)],
        allowed: 10_737_418_240,   // 10.00 GiB
        cap: 10_737_418_240,       // truth.json cap_bytes 10737418240
        allocated: 10_640_781_476, // 9.91 GiB
        unallocated: 63_061_361,   // 60.14 MiB
        frames: 16,
        innermost: (
            "/opt/torch/.venv/lib/python3.12/site-packages/torch/nn/modules/conv.py",
            548,
            "_conv_forward",
        ),
        kind: Limit,
        reason: "60.14 MiB unallocated covers the excess, but 9.91 GiB + 50 MiB leaves < 1% of the cap; the run needs 10.71 GiB and the expandable run OOMs too",
    },
    Row {
        id: "resnet50__expandable_segments__cap10",
        text: include_str!("data/oom/resnet50__expandable_segments__cap10.txt"),
        line: 50,
        requested: 52_428_800,        // 50.00 MiB
        total: 150_109_106_995,       // 139.80 GiB
        free: 138_759_655_916,        // 129.23 GiB
        this_process: 11_349_451_080, // 10.57 GiB
        others: &[],
        allowed: 10_737_418_240,   // 10.00 GiB
        cap: 10_737_418_240,       // truth.json cap_bytes 10737418240
        allocated: 10_683_731_149, // 9.95 GiB
        unallocated: 6_438_257,    // 6.14 MiB
        frames: 16,
        innermost: (
            "/opt/torch/.venv/lib/python3.12/site-packages/torch/nn/functional.py",
            2846,
            "batch_norm",
        ),
        kind: Limit,
        reason: "9.95 GiB + 50 MiB leaves < 1% of the 10 GiB cap",
    },
    Row {
        id: "resnet50__gc_threshold_06__cap10",
        text: include_str!("data/oom/resnet50__gc_threshold_06__cap10.txt"),
        line: 50,
        requested: 52_428_800,        // 50.00 MiB
        total: 150_109_106_995,       // 139.80 GiB
        free: 136_569_222_595,        // 127.19 GiB
        this_process: 11_360_188_498, // 10.58 GiB
        others: &[(2328, 2_158_221_066)],
        allowed: 10_737_418_240,   // 10.00 GiB
        cap: 10_737_418_240,       // truth.json cap_bytes 10737418240
        allocated: 10_640_781_476, // 9.91 GiB
        unallocated: 63_061_361,   // 60.14 MiB
        frames: 16,
        innermost: (
            "/opt/torch/.venv/lib/python3.12/site-packages/torch/nn/modules/conv.py",
            548,
            "_conv_forward",
        ),
        kind: Limit,
        reason: "same numbers as the baseline",
    },
    Row {
        id: "resnet50__max_split_128__cap10",
        text: include_str!("data/oom/resnet50__max_split_128__cap10.txt"),
        line: 50,
        requested: 52_428_800,        // 50.00 MiB
        total: 150_109_106_995,       // 139.80 GiB
        free: 126_314_988_175,        // 117.64 GiB
        this_process: 11_360_188_498, // 10.58 GiB
        others: &[(2248, 12_423_192_904)],
        allowed: 10_737_418_240,   // 10.00 GiB
        cap: 10_737_418_240,       // truth.json cap_bytes 10737418240
        allocated: 10_651_518_894, // 9.92 GiB
        unallocated: 56_245_617,   // 53.64 MiB
        frames: 16,
        innermost: (
            "/opt/torch/.venv/lib/python3.12/site-packages/torch/nn/modules/conv.py",
            548,
            "_conv_forward",
        ),
        kind: Limit,
        reason: "9.92 GiB + 50 MiB leaves < 1% of the cap",
    },
    Row {
        id: "resnet50__roundup_pow2_4__tight10.92",
        text: include_str!("data/oom/resnet50__roundup_pow2_4__tight10.92.txt"),
        line: 50,
        requested: 117_440_512,       // 112.00 MiB
        total: 150_109_106_995,       // 139.80 GiB
        free: 123_684_320_707,        // 115.19 GiB
        this_process: 12_262_131_630, // 11.42 GiB
        others: &[(4661, 1_428_076_626), (4663, 12_713_103_196)],
        allowed: 11_725_260_718,   // 10.92 GiB
        cap: 11_725_260_718,       // truth.json cap_bytes 11725260718.08
        allocated: 11_521_249_772, // 10.73 GiB
        unallocated: 86_171_976,   // 82.18 MiB
        frames: 16,
        innermost: (
            "/opt/torch/.venv/lib/python3.12/site-packages/torch/nn/functional.py",
            2846,
            "batch_norm",
        ),
        kind: Limit,
        reason: "10.73 GiB + 112 MiB leaves < 1% of the 10.92 GiB cap (roundup inflates allocated; baseline peaks at 10.71)",
    },
    Row {
        id: "resnet50__roundup_pow2_4__tight11.35",
        text: include_str!("data/oom/resnet50__roundup_pow2_4__tight11.35.txt"),
        line: 50,
        requested: 58_720_256,        // 56.00 MiB
        total: 150_109_106_995,       // 139.80 GiB
        free: 127_388_729_999,        // 118.64 GiB
        this_process: 12_788_265_124, // 11.91 GiB
        others: &[(4771, 9_910_637_036)],
        allowed: 12_186_969_702,   // 11.35 GiB
        cap: 12_186_969_702,       // truth.json cap_bytes 12186969702.4
        allocated: 12_058_120_684, // 11.23 GiB
        unallocated: 86_151_004,   // 82.16 MiB
        frames: 16,
        innermost: (
            "/opt/torch/.venv/lib/python3.12/site-packages/torch/nn/functional.py",
            2846,
            "batch_norm",
        ),
        kind: Limit,
        reason: "11.23 GiB + 56 MiB leaves < 1% of the 11.35 GiB cap",
    },
    Row {
        id: "resnet50__sgd__cap10",
        text: include_str!("data/oom/resnet50__sgd__cap10.txt"),
        line: 50,
        requested: 52_428_800,        // 50.00 MiB
        total: 150_109_106_995,       // 139.80 GiB
        free: 127_377_992_581,        // 118.63 GiB
        this_process: 11_360_188_498, // 10.58 GiB
        others: &[(2311, 11_360_188_498)],
        allowed: 10_737_418_240,   // 10.00 GiB
        cap: 10_737_418_240,       // truth.json cap_bytes 10737418240
        allocated: 10_640_781_476, // 9.91 GiB
        unallocated: 63_061_361,   // 60.14 MiB
        frames: 16,
        innermost: (
            "/opt/torch/.venv/lib/python3.12/site-packages/torch/nn/modules/conv.py",
            548,
            "_conv_forward",
        ),
        kind: Limit,
        reason: "SGD needs 10.61 GiB allocated; 9.91 GiB + 50 MiB leaves < 1% of the cap",
    },
];

#[test]
fn corpus_tracebacks() {
    assert_eq!(CORPUS.len(), 26);
    for r in CORPUS {
        let m = one(r.text);
        let id = r.id;
        assert_eq!(
            (m.framework, m.dialect),
            (Framework::Pytorch, Dialect::Torch21),
            "{id}"
        );
        assert_eq!(
            m.exception.as_deref(),
            Some("torch.OutOfMemoryError"),
            "{id}"
        );
        assert_eq!(m.line, r.line, "{id}");
        assert_eq!(m.requested_bytes, Some(r.requested), "{id}");
        assert_eq!(m.total_capacity_bytes, Some(r.total), "{id}");
        assert_eq!(m.free_bytes, Some(r.free), "{id}");
        assert_eq!(m.process_in_use_bytes, Some(r.this_process), "{id}");
        let others: Vec<_> = m
            .other_processes
            .iter()
            .map(|p| (p.pid, p.in_use_bytes))
            .collect();
        assert_eq!(others, r.others, "{id}");
        assert_eq!(m.allowed_bytes, Some(r.allowed), "{id}");
        assert!(
            r.allowed.abs_diff(r.cap) <= GIB / 200,
            "{id}: allowed {} vs cap {}",
            r.allowed,
            r.cap
        );
        assert_eq!(m.allocated_by_pytorch_bytes, Some(r.allocated), "{id}");
        assert_eq!(m.reserved_unallocated_bytes, Some(r.unallocated), "{id}");
        assert_eq!(
            m.reserved_total_bytes,
            Some(r.allocated + r.unallocated),
            "{id}"
        );
        assert_eq!(m.private_pools_bytes, None, "{id}");
        assert_eq!(m.gpu_index, Some(0), "{id}");
        assert_eq!(m.frames.len(), r.frames, "{id}");
        let inner = m.frames.last().unwrap();
        assert_eq!(
            (inner.file.as_str(), inner.line, inner.function.as_str()),
            r.innermost,
            "{id}"
        );
        assert!(
            inner.code.is_some(),
            "{id}: source line under the innermost frame"
        );
        assert_eq!(
            m.frames[0].file, "/opt/job/train.py",
            "{id}: outermost first"
        );
        assert_eq!(
            m.diagnosis.kind, r.kind,
            "{id}: {}",
            m.diagnosis.explanation
        );
        // The message text is the one truth.json records, with whitespace runs collapsed.
        assert!(
            m.text.starts_with("CUDA out of memory. Tried to allocate"),
            "{id}"
        );
        assert!(
            m.text
                .ends_with("#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)"),
            "{id}"
        );
    }
}

#[test]
fn corpus_explanations_carry_the_numbers() {
    let m = one(include_str!("data/oom/hf_gpt2__baseline__tight14.41.txt"));
    let e = &m.diagnosis.explanation;
    for needle in [
        "14.41 GiB allowed",
        "562.94 MiB",
        "12.60 GiB",
        "1.54 GiB",
        "expandable_segments:True",
    ] {
        assert!(e.contains(needle), "{needle:?} missing from {e}");
    }
    let m = one(include_str!("data/oom/gpt__baseline__cap10.txt"));
    let e = &m.diagnosis.explanation;
    for needle in [
        "10.00 GiB allowed",
        "108.35 GiB free",
        "set_per_process_memory_fraction",
        "torch.autocast",
    ] {
        assert!(e.contains(needle), "{needle:?} missing from {e}");
    }
    let m = &one(include_str!("data/oom/resnet50__sgd__cap10.txt"));
    let code: Vec<_> = m
        .frames
        .iter()
        .map(|f| f.code.as_deref().unwrap_or(""))
        .collect();
    assert_eq!(code[0], "out = fwd(x)");
    assert_eq!(code[15], "return F.conv2d(");
}

// ---------------------------------------------------------------------------------------------
// Logs: prefixes, wrapping, several messages, nothing.

#[test]
fn rank_prefixed_traceback_with_a_wrapped_message() {
    let log = "\
[rank0]: Traceback (most recent call last):
[rank0]:   File \"/work/train.py\", line 42, in <module>
[rank0]:     main()
[rank0]:   File \"/work/train.py\", line 30, in main
[rank0]:     out = model(x)
[rank0]:           ^^^^^^^^
[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of
[rank0]: 79.15 GiB of which 5.06 MiB is free. Process 1234 has 79.14 GiB memory in use. Of the allocated memory
[rank0]: 78.10 GiB is allocated by PyTorch, and 512.00 MiB is reserved by PyTorch but unallocated.
W1202 12:00:01.000000 140 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 1235 closing signal SIGTERM
";
    let m = one(log);
    assert_eq!(m.line, 7);
    assert_eq!(m.requested_bytes, Some(20 << 20));
    assert_eq!(m.free_bytes, Some(5_305_795)); // 5.06 MiB
    assert_eq!(m.other_processes.len(), 1);
    assert_eq!(m.other_processes[0].pid, 1234);
    assert_eq!(m.reserved_unallocated_bytes, Some(512 << 20));
    assert!(!m.text.contains("[rank0]"), "{}", m.text);
    assert_eq!(m.frames.len(), 2);
    assert_eq!(m.frames[1].function, "main");
    assert_eq!(m.frames[1].code.as_deref(), Some("out = model(x)"));
    assert_eq!(m.exception.as_deref(), Some("torch.OutOfMemoryError"));
}

#[test]
fn other_log_prefixes() {
    let cases = [
        // glog / absl
        "E1202 12:34:56.789012  12345 pjrt_stream_executor_client.cc:2985] Execution of replica 0 \
         failed: RESOURCE_EXHAUSTED: Out of memory while trying to allocate\n\
         E1202 12:34:56.789012  12345 pjrt_stream_executor_client.cc:2985] 1.00GiB.",
        // Python logging with timestamps, and Windows line ends
        "2024-03-05 12:34:56,789 - ERROR - RESOURCE_EXHAUSTED: Out of memory while trying to allocate\r\n\
         2024-03-05 12:34:56,789 - ERROR - 1.00GiB.\r\n",
        // kubectl --timestamps / GitHub Actions
        "2024-03-05T12:34:56.123456789Z RESOURCE_EXHAUSTED: Out of memory while trying to allocate\n\
         2024-03-05T12:34:56.123456789Z 1.00GiB.",
        // mpirun --tag-output, Ray, docker compose, srun --label
        "[1,0]<stderr>:RESOURCE_EXHAUSTED: Out of memory while trying to allocate\n[1,0]<stderr>:1.00GiB.",
        "(RayTrainWorker pid=4242, ip=10.0.0.7) RESOURCE_EXHAUSTED: Out of memory while trying to allocate\n\
         (RayTrainWorker pid=4242, ip=10.0.0.7) 1.00GiB.",
        "trainer-1  | RESOURCE_EXHAUSTED: Out of memory while trying to allocate\ntrainer-1  | 1.00GiB.",
        "3: RESOURCE_EXHAUSTED: Out of memory while trying to allocate\n3: 1.00GiB.",
    ];
    for log in cases {
        let m = one(log);
        assert_eq!(m.requested_bytes, Some(GIB), "{log}");
        assert_eq!(
            m.text, "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.00GiB.",
            "{log}"
        );
    }
}

#[test]
fn mid_word_wrap_keeps_the_head() {
    // A log that cuts lines at a fixed width can split a word; only the head is read then.
    let log = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capac\n\
               ity of 79.15 GiB of which 5.06 MiB is free. Of the allocated memory 78.10 GiB is allocated by PyTorch, \
               and 512.00 MiB is reserved by PyTorch but unallocated.";
    let all = parse_oom_log(log);
    assert_eq!(all[0].dialect, Dialect::TorchPartial);
    assert_eq!(all[0].requested_bytes, Some(20 << 20));
    assert_eq!(all[0].diagnosis.kind, DiagnosisKind::Demand);
    // The rest still yields its numbers, as a message of its own on line 2.
    assert_eq!(all.len(), 2);
    assert_eq!(all[1].allocated_by_pytorch_bytes, Some(83_859_236_454)); // 78.10 GiB
}

#[test]
fn two_messages_in_one_log_with_chained_tracebacks() {
    let log = "\
Traceback (most recent call last):
  File \"a.py\", line 10, in <module>
    step()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 8.00 GiB of which 100.00 MiB is free. Of the allocated memory 7.00 GiB is allocated by PyTorch, and 20.00 MiB is reserved by PyTorch but unallocated.

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File \"a.py\", line 12, in <module>
    torch.cuda.empty_cache()
  File \"/torch/cuda/memory.py\", line 192, in empty_cache
    torch._C._cuda_emptyCache()
RuntimeError: CUDA error: out of memory
";
    let all = parse_oom_log(log);
    assert_eq!(all.len(), 2);
    assert_eq!((all[0].line, all[1].line), (4, 13));
    assert_eq!(all[0].frames.len(), 1);
    assert_eq!(all[0].frames[0].line, 10);
    assert_eq!(all[1].frames.len(), 2);
    assert_eq!(all[1].frames[1].function, "empty_cache");
    assert_eq!(all[1].exception.as_deref(), Some("RuntimeError"));
    assert_eq!(all[0].diagnosis.kind, DiagnosisKind::Demand);
    assert_eq!(all[1].diagnosis.kind, DiagnosisKind::Unknown);

    // Two corpus tracebacks pasted one after the other.
    let a = include_str!("data/oom/gpt__baseline__cap10.txt");
    let b = include_str!("data/oom/resnet50__sgd__cap10.txt");
    let all = parse_oom_log(&format!("{a}{b}"));
    assert_eq!(all.len(), 2);
    assert_eq!((all[0].line, all[1].line), (11, 11 + 50));
    assert_eq!((all[0].frames.len(), all[1].frames.len()), (4, 16));
    assert_eq!(all[1].requested_bytes, Some(50 << 20));
}

#[test]
fn no_oom_no_message() {
    for text in [
        "",
        "\n\n",
        "Traceback (most recent call last):\n  File \"a.py\", line 1, in <module>\n    1/0\nZeroDivisionError: division by zero\n",
        "Epoch 3: loss 0.123, 12.55 GiB reserved, GPU 0 at 98%\n",
        "GPU 0 has 80 GiB of memory. Tried to allocate nothing.",
    ] {
        assert!(parse_oom_log(text).is_empty(), "{text:?}");
        assert!(!looks_like_oom_log(text), "{text:?}");
    }
    // Prose about OOMs looks like a log but holds no message.
    assert!(looks_like_oom_log(
        "we hit an out of memory error yesterday"
    ));
    assert!(parse_oom_log("we hit an out of memory error yesterday").is_empty());
}

#[test]
fn serialises_with_the_contract_names() {
    let m = one(include_str!("data/oom/gpt__baseline__cap10.txt"));
    let v = serde_json::to_value(&m).unwrap();
    assert_eq!(v["framework"], "pytorch");
    assert_eq!(v["dialect"], "torch>=2.1");
    assert_eq!(v["diagnosis"]["kind"], "limit");
    assert_eq!(v["other_processes"][0]["pid"], 768);
    assert_eq!(v["frames"][3]["function"], "_engine_run_backward");
    assert_eq!(v["tensor_shape"], serde_json::Value::Null);
    let back: OomMessage = serde_json::from_value(v).unwrap();
    assert_eq!(back, m);
    for d in Dialect::ALL {
        assert_eq!(serde_json::to_value(d).unwrap(), d.as_str());
    }
    assert_eq!(
        serde_json::to_value(Framework::PytorchCudaMallocAsync).unwrap(),
        "pytorch_cuda_malloc_async"
    );
    assert_eq!(
        serde_json::to_value(DiagnosisKind::OtherProcesses).unwrap(),
        "other_processes"
    );
}

// ---------------------------------------------------------------------------------------------
// Robustness: nothing panics, nothing is slow.

#[test]
fn pathological_input_is_fast_and_safe() {
    let mb = 1 << 20;
    let repeat = |s: &str| s.repeat(mb / s.len() + 1);
    let binary: String = (0..mb).map(|i| char::from((i % 256) as u8)).collect();
    let cases = [
        repeat("Tried to allocate "),
        repeat("CUDA out of memory. "),
        repeat("CUDA out of memory. Tried to allocate 1.00 MiB. "),
        repeat("GPU 0 has a total capacity of 1.00 GiB of which "),
        repeat("Process 1 has 1.00 GiB memory in use. "),
        repeat("Of the allocated memory 1.00 GiB is allocated by PyTorch, and "),
        repeat("If reserved but unallocated memory is large try setting "),
        repeat("  File \"x.py\", line 1, in f\n"),
        repeat("[rank0]: "),
        repeat("OOM when allocating tensor with shape[1,"),
        repeat("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1B. [a=''] "),
        repeat("9"),
        repeat(" "),
        repeat("\n"),
        repeat("\r"),
        repeat("é…\u{0}"),
        binary,
    ];
    for text in &cases {
        let start = Instant::now();
        let found = parse_oom_log(text);
        let _ = looks_like_oom_log(text);
        let took = start.elapsed();
        // Generous for unoptimised test builds; an optimised build takes a few ms per MB.
        assert!(
            took < Duration::from_secs(10),
            "{took:?} for {:?}…",
            &text[..40]
        );
        for m in found.iter().take(3) {
            assert!(!m.diagnosis.explanation.is_empty());
        }
    }
    // A message per 48 bytes: every one is found.
    let n = parse_oom_log(&cases[2]).len();
    assert_eq!(n, cases[2].len() / 48);
}

#[test]
fn looks_like_never_misses_what_parse_finds() {
    let texts = [
        include_str!("data/oom/gpt__baseline__cap10.txt"),
        "...GPU 0 has a total capacity of 1.00 GiB of which 0 bytes is free. Of the allocated memory 1 bytes is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated.",
        "CUBLAS_STATUS_ALLOC_FAILED",
        "Failed to allocate request for 1B (1B) on device ordinal 0",
        "OOM when allocating tensor of shape [1] and type float",
        "[rank0]: CUDA out of\n[rank0]: memory.",
    ];
    for t in texts {
        assert!(!parse_oom_log(t).is_empty(), "{t}");
        assert!(looks_like_oom_log(t), "{t}");
    }
}
