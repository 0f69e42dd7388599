// A CPU emulator of the CUDA driver API, as much of it as cudarc and crates/cuda use, that runs
// the kernels of ../kernels compiled as C++. Built as a fake libcuda.so
// (scripts/cuda_emulator.sh), it lets the check program (src/check.rs) and every launch of
// src/ops.rs run on a machine without a GPU: argument order, grid shapes, indexing, the
// shuffle reductions and their association are all exercised, and compared with the CPU
// reference. It says nothing about the real hardware (memory model, speed, the driver's PTX
// compiler): scripts/gpu_check.sh does that.
//
// Execution model: blocks one after another on the launching thread; the threads of a block as
// fibers (ucontext), each run until it waits at a barrier (__syncthreads for the block,
// __syncwarp and shuffles for each warp of 32), round robin. (OS threads per CUDA thread spent
// nearly all their time yielding to each other: a launch took ~25 ms on two cores.)
// Device memory is host memory: a CUdeviceptr is the address. Everything is synchronous.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <ucontext.h>
#include <utility>
#include <vector>

// ------------------------------------------------------------------ CUDA C on the CPU
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static  // one block at a time: a static is the block's shared memory

struct dim3e {
    unsigned x = 0, y = 0, z = 0;
};
// The running fiber's (set by the scheduler before it resumes a fiber).
static dim3e threadIdx, blockIdx;
static dim3e blockDim, gridDim;
struct int4 {
    int x, y, z, w;
};

inline float __uint_as_float(unsigned u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline unsigned __float_as_uint(float f) {
    unsigned u;
    memcpy(&u, &f, 4);
    return u;
}
// IEEE binary16 conversions (round to nearest even) through the compiler's _Float16.
inline float emu_f16_to_f32(unsigned short h) {
    _Float16 v;
    memcpy(&v, &h, 2);
    return (float)v;
}
inline unsigned short emu_f32_to_f16(float f) {
    _Float16 v = (_Float16)f;
    unsigned short h;
    memcpy(&h, &v, 2);
    return h;
}

// A thread of a block: its context and stack, and the barrier generation it waits to end.
struct Fiber {
    ucontext_t ctx;
    std::unique_ptr<char[]> stack;
    bool done = false;
    const struct Barrier* waiting = nullptr;
    unsigned gen = 0;
};
static ucontext_t scheduler;
static Fiber* current;

// A reusable barrier: a fiber that arrives waits (goes back to the scheduler) until the last of
// the `n` arrives, which goes on.
struct Barrier {
    explicit Barrier(unsigned n) : n(n) {}
    void arrive_and_wait() {
        if (++count == n) {
            count = 0;
            gen++;
            return;
        }
        current->waiting = this;
        current->gen = gen;
        swapcontext(&current->ctx, &scheduler);
    }
    unsigned n, count = 0, gen = 0;
};

struct Warp {
    Barrier bar{32};
    uint64_t buf[32];
};
struct Block {
    explicit Block(unsigned threads) : bar(threads) {
        for (unsigned w = 0; w < threads / 32; w++) warps.push_back(std::make_unique<Warp>());
    }
    Barrier bar;
    std::vector<std::unique_ptr<Warp>> warps;
};
static Block* tl_block;
static Warp* tl_warp;
static int tl_lane;

inline void __syncthreads() { tl_block->bar.arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { tl_warp->bar.arrive_and_wait(); }

// Every lane of the warp publishes its value, then reads lane `src`'s.
template <class T>
T shfl_from(T v, int src) {
    uint64_t b = 0;
    memcpy(&b, &v, sizeof(T));
    tl_warp->buf[tl_lane] = b;
    tl_warp->bar.arrive_and_wait();
    uint64_t r = tl_warp->buf[src];
    tl_warp->bar.arrive_and_wait();
    T out;
    memcpy(&out, &r, sizeof(T));
    return out;
}
template <class T>
T __shfl_xor_sync(unsigned, T v, int lane_mask, int width = 32) {
    if (lane_mask >= width) abort();  // the kernels stay inside their segment
    return shfl_from(v, tl_lane ^ lane_mask);
}
template <class T>
T __shfl_sync(unsigned, T v, int src, int width = 32) {
    return shfl_from(v, (tl_lane & ~(width - 1)) | (src & (width - 1)));
}

#include "../kernels/act.cu"
#include "../kernels/argmax.cu"
#include "../kernels/attention.cu"
#include "../kernels/dense.cu"
#include "../kernels/embed.cu"
#include "../kernels/kv_cache.cu"
#include "../kernels/norm.cu"
#include "../kernels/qmatmul.cu"
#include "../kernels/rope.cu"

// ------------------------------------------------------------------ kernels by name
using Launcher = std::function<void(void**)>;

template <class... A, size_t... I>
void call(void (*k)(A...), void** p, std::index_sequence<I...>) {
    k(*static_cast<A*>(p[I])...);
}
template <class... A>
Launcher wrap(void (*k)(A...)) {
    return [k](void** p) { call(k, p, std::index_sequence_for<A...>{}); };
}

#define K(name) {#name, wrap(name)}
static const std::map<std::string, Launcher>& kernels() {
    static const std::map<std::string, Launcher> m = {
        K(silu_mul_f32),        K(argmax_f32),      K(paged_attention_f32), K(paged_attention_f16),
        K(paged_attention_bf16), K(dense_f32),      K(dense_f16),           K(dense_bf16),
        K(embedding_f32),       K(embedding_f16),   K(embedding_bf16),      K(embedding_q8_0),
        K(embedding_q4k),       K(write_kv_f32),    K(write_kv_f16),        K(write_kv_bf16),
        K(rms_norm_f32),        K(add_rms_norm_f32), K(quantize_acts),      K(qmatmul_q8_0),
        K(qmatmul_q4k),         K(rope_f32),
    };
    return m;
}

// What the fibers of a launch run.
static const Launcher* running;
static void** running_params;
static void fiber_main() {
    (*running)(running_params);
    current->done = true;  // (uc_link goes back to the scheduler)
}

// Runs block `b`'s threads (`fibers`) round robin, each until it waits or ends. A pass in which
// none can run is a deadlock (a barrier some thread never reaches): abort, as a hung GPU would.
static void run_block(Block& b, std::vector<std::unique_ptr<Fiber>>& fibers, unsigned threads) {
    static const size_t STACK = size_t(256) << 10;
    for (unsigned t = 0; t < threads; t++) {
        Fiber& f = *fibers[t];
        if (!f.stack) f.stack.reset(new char[STACK]);
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack.get();
        f.ctx.uc_stack.ss_size = STACK;
        f.ctx.uc_link = &scheduler;
        makecontext(&f.ctx, fiber_main, 0);
        f.done = false;
        f.waiting = nullptr;
    }
    for (unsigned live = threads; live > 0;) {
        bool ran = false;
        for (unsigned t = 0; t < threads; t++) {
            Fiber& f = *fibers[t];
            if (f.done || (f.waiting && f.waiting->gen == f.gen)) continue;
            f.waiting = nullptr;
            current = &f;
            tl_block = &b;
            tl_warp = b.warps[t / 32].get();
            tl_lane = (int)(t % 32);
            threadIdx = {t, 0, 0};
            swapcontext(&scheduler, &f.ctx);
            live -= f.done;
            ran = true;
        }
        if (!ran) abort();
    }
}

// One launch at a time (shared memory is the kernels' statics), its blocks one after another.
static void launch(const Launcher& k, dim3e grid, dim3e block, void** params) {
    static std::mutex one_at_a_time;
    static std::vector<std::unique_ptr<Fiber>> fibers;
    std::lock_guard<std::mutex> g(one_at_a_time);
    unsigned threads = block.x * block.y * block.z;
    if (block.y != 1 || block.z != 1 || threads % 32 != 0) abort();  // what the kernels use
    blockDim = block;
    gridDim = grid;
    running = &k;
    running_params = params;
    while (fibers.size() < threads) fibers.push_back(std::make_unique<Fiber>());
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                blockIdx = {bx, by, bz};
                Block b(threads);
                run_block(b, fibers, threads);
            }
}

// ------------------------------------------------------------------ the driver API
typedef int CUresult;
enum { OK = 0, INVALID_VALUE = 1, NOT_FOUND = 500 };
typedef unsigned long long CUdeviceptr;

#define API extern "C" __attribute__((visibility("default")))
static int ctx_token, module_token, event_token;

API CUresult cuInit(unsigned) { return OK; }
API CUresult cuDriverGetVersion(int* v) { *v = 12080; return OK; }
API CUresult cuDeviceGetCount(int* n) { *n = 1; return OK; }
API CUresult cuDeviceGet(int* dev, int ordinal) { *dev = ordinal; return ordinal == 0 ? OK : INVALID_VALUE; }
API CUresult cuDeviceGetName(char* name, int len, int) {
    snprintf(name, len, "CUDA emulator on the CPU (not a GPU)");
    return OK;
}
API CUresult cuDeviceGetAttribute(int* v, int attrib, int) {
    // 75/76: compute capability 8.0; everything else (memory pools, ...) absent.
    *v = attrib == 75 ? 8 : 0;
    return OK;
}
// The device's memory: 1 GiB, counted, so that running out of it is reported as on a GPU.
static const size_t TOTAL_MEM = size_t(1) << 30;
static std::mutex mem_lock;
static std::map<CUdeviceptr, size_t> allocations;
static size_t allocated;
API CUresult cuDeviceTotalMem_v2(size_t* bytes, int) { *bytes = TOTAL_MEM; return OK; }
API CUresult cuDevicePrimaryCtxRetain(void** ctx, int) { *ctx = &ctx_token; return OK; }
API CUresult cuDevicePrimaryCtxRelease_v2(int) { return OK; }
API CUresult cuCtxSetCurrent(void*) { return OK; }
API CUresult cuCtxGetCurrent(void** ctx) { *ctx = &ctx_token; return OK; }
API CUresult cuCtxSynchronize() { return OK; }
API CUresult cuStreamSynchronize(void*) { return OK; }
API CUresult cuStreamWaitEvent(void*, void*, unsigned) { return OK; }
API CUresult cuEventCreate(void** e, unsigned) { *e = &event_token; return OK; }
API CUresult cuEventRecord(void*, void*) { return OK; }
API CUresult cuEventSynchronize(void*) { return OK; }
API CUresult cuEventDestroy_v2(void*) { return OK; }
API CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) {
    std::lock_guard<std::mutex> g(mem_lock);
    if (bytes > TOTAL_MEM - allocated) return 2;  // CUDA_ERROR_OUT_OF_MEMORY
    *p = (CUdeviceptr)calloc(bytes ? bytes : 1, 1);
    if (!*p) return 2;
    allocations[*p] = bytes;
    allocated += bytes;
    return OK;
}
API CUresult cuMemFree_v2(CUdeviceptr p) {
    std::lock_guard<std::mutex> g(mem_lock);
    auto it = allocations.find(p);
    if (it != allocations.end()) {
        allocated -= it->second;
        allocations.erase(it);
    }
    free((void*)p);
    return OK;
}
API CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
    std::lock_guard<std::mutex> g(mem_lock);
    *free_bytes = TOTAL_MEM - allocated;
    *total = TOTAL_MEM;
    return OK;
}
API CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n) { memset((void*)p, v, n); return OK; }
API CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, void*) { return cuMemsetD8_v2(p, v, n); }
API CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void* s, size_t n) { memcpy((void*)d, s, n); return OK; }
API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void* s, size_t n, void*) { return cuMemcpyHtoD_v2(d, s, n); }
API CUresult cuMemcpyDtoH_v2(void* d, CUdeviceptr s, size_t n) { memcpy(d, (void*)s, n); return OK; }
API CUresult cuMemcpyDtoHAsync_v2(void* d, CUdeviceptr s, size_t n, void*) { return cuMemcpyDtoH_v2(d, s, n); }
API CUresult cuModuleLoadData(void** m, const void*) { *m = &module_token; return OK; }
API CUresult cuModuleUnload(void*) { return OK; }
API CUresult cuModuleGetFunction(void** f, void*, const char* name) {
    auto it = kernels().find(name);
    if (it == kernels().end()) return NOT_FOUND;
    *f = (void*)&it->second;
    return OK;
}
// Fault injection, for the engine's failure path: with VLLM_RS_EMULATOR_FAIL_AFTER=N every launch
// after the first N fails, as on a GPU whose context an error has poisoned.
static long fail_after() {
    static const long n = [] {
        const char* v = getenv("VLLM_RS_EMULATOR_FAIL_AFTER");
        return v ? atol(v) : -1L;
    }();
    return n;
}
static std::atomic<long> launches{0};

API CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                            unsigned, void*, void** params, void**) {
    if (fail_after() >= 0 && launches++ >= fail_after()) return 719;  // CUDA_ERROR_LAUNCH_FAILED
    launch(*(const Launcher*)f, {gx, gy, gz}, {bx, by, bz}, params);
    return OK;
}
API CUresult cuGetErrorString(CUresult, const char** s) { *s = "CUDA emulator error"; return OK; }
API CUresult cuGetErrorName(CUresult, const char** s) { *s = "CUDA_ERROR_EMULATOR"; return OK; }
