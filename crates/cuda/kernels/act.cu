// Gated activations, element-wise.
#include "common.cuh"

// gate = silu(gate) · up = gate / (1 + e^-gate) · up, with the CPU's exp (ops::silu_mul).
extern "C" __global__ void silu_mul_f32(float* gate, const float* up, u64 n) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g = gate[i];
    gate[i] = g / (1.0f + exp_cpu(-g)) * up[i];
}
