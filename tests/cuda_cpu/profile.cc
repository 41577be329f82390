/* profile.cc - the CPU execution model's kernel profile (profile.h says what it measures).
   The executor and the checkers report each lane's memory accesses, collectives and
   barriers while dcp_cuda_cpu_profiling is set; a warp's requests are complete (and
   measured) at each synchronisation of the warp and at the end of its block. Off by default:
   the tests pay one flag test per access. */
#include "model.h"
#include "profile.h"

#include <stdio.h>

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <vector>

bool dcp_cuda_cpu_profiling;

const char *const dcp_cuda_cpu_memory_class_names[DCP_CUDA_CPU_MEMORY_CLASSES] = {
    "global load", "global store", "global atomic", "cp.async global", "shared load",
    "shared store", "ldmatrix", "cp.async shared"};

enum {
    SECTOR_BYTES = 32,    /* the unit global memory moves between L2 and an SM */
    BANKS = 32,           /* shared memory banks, 4 bytes wide */
    BANK_BYTES = 4,
    WAVEFRONT_BYTES = BANKS * BANK_BYTES, /* what one conflict-free pass serves */
    LDMATRIX_LANES = 8,   /* lanes that name the rows of one 8 x 8 matrix: one phase */
    MAX_WARPS = 32,
    MAX_THREADS = MAX_WARPS * DCP_CUDA_CPU_WARP_SIZE
};

/* One lane's part of a request. */
struct lane_access {
    uintptr_t address;
    uint32_t bytes;
    uint32_t lane;
};
struct request {
    std::vector<lane_access> lanes;
};
/* The requests one instruction (place, class) of a warp has in flight: the k-th execution by
   each lane joins request k. */
struct instruction {
    int memory_class;
    uint32_t executions[DCP_CUDA_CPU_WARP_SIZE] = {};
    std::vector<request> requests;
};
struct warp_requests {
    std::unordered_map<uint64_t, instruction> instructions; /* by place and class */
};

struct kernel_state {
    dcp_cuda_cpu_kernel_profile figures;
    std::unordered_set<uintptr_t> sectors; /* distinct device sectors touched */
};

static std::vector<kernel_state> kernels; /* in order of first launch */
static std::map<const void *, size_t> kernel_index;
static kernel_state *running;
static warp_requests warps[MAX_WARPS];
/* Per thread, the bytes its last wide access covered (dcp_cuda.cu's dcp_cuda__vload/vstore, one
   device instruction of 8 or 16 bytes): the host compiler splits such an aggregate access into
   its fields, whose own callbacks are not requests of their own. */
static uintptr_t covered_begin[MAX_THREADS], covered_end[MAX_THREADS];

/* ---------------------------------------------------------------------- measures */

/* The lanes' byte ranges merged (sorted by address): the distinct bytes they name, and the
   distinct units of `unit` bytes those cover (appended to `units`, sorted and unique). */
static uint64_t distinct_bytes(std::vector<lane_access> &lanes, uintptr_t unit,
                               std::vector<uintptr_t> &units)
{
    std::sort(lanes.begin(), lanes.end(), [](const lane_access &a, const lane_access &b) {
        return a.address < b.address;
    });
    uint64_t bytes = 0;
    uintptr_t covered = 0; /* bytes below this are counted */
    for (const lane_access &a : lanes) {
        const uintptr_t begin = std::max(a.address, covered), end = a.address + a.bytes;
        if (end <= begin) continue;
        bytes += end - begin;
        covered = end;
        for (uintptr_t u = begin / unit; u <= (end - 1) / unit; u++)
            if (units.empty() || units.back() != u) units.push_back(u);
    }
    return bytes;
}

static void measure_global(const request &r, dcp_cuda_cpu_memory_figures &f,
                           std::unordered_set<uintptr_t> &touched)
{
    std::vector<lane_access> lanes = r.lanes;
    std::vector<uintptr_t> sectors;
    const uint64_t bytes = distinct_bytes(lanes, SECTOR_BYTES, sectors);
    for (uintptr_t s : sectors) touched.insert(s);
    f.bytes += bytes;
    f.units += sectors.size();
    f.ideal_units += (bytes + SECTOR_BYTES - 1) / SECTOR_BYTES;
}

/* Wavefronts of one phase: the most distinct words one bank serves (a word several lanes
   name is read once: a broadcast). */
static uint64_t phase_wavefronts(std::vector<lane_access> lanes)
{
    std::vector<uintptr_t> words;
    distinct_bytes(lanes, BANK_BYTES, words);
    uint64_t per_bank[BANKS] = {}, most = 0;
    for (uintptr_t w : words) most = std::max(most, ++per_bank[w % BANKS]);
    return most;
}

/* Lanes per phase: a warp's request is served in phases of 128 bytes of lanes (32 lanes of 4
   bytes, 16 of 8, 8 of 16); an ldmatrix in one phase per matrix. */
static uint32_t phase_lanes(int memory_class, uint32_t widest)
{
    if (memory_class == DCP_CUDA_CPU_LDMATRIX) return LDMATRIX_LANES;
    const uint32_t width = std::max<uint32_t>(widest, BANK_BYTES);
    return std::max<uint32_t>(1, WAVEFRONT_BYTES / width);
}

static void measure_shared(const request &r, int memory_class, dcp_cuda_cpu_memory_figures &f)
{
    uint32_t widest = 0;
    for (const lane_access &a : r.lanes) widest = std::max(widest, a.bytes);
    const uint32_t per_phase = phase_lanes(memory_class, widest);
    std::vector<lane_access> phases[DCP_CUDA_CPU_WARP_SIZE];
    for (const lane_access &a : r.lanes) phases[a.lane / per_phase].push_back(a);
    for (const std::vector<lane_access> &phase : phases)
        if (!phase.empty()) f.units += phase_wavefronts(phase);
    std::vector<lane_access> lanes = r.lanes;
    std::vector<uintptr_t> words;
    const uint64_t bytes = distinct_bytes(lanes, BANK_BYTES, words);
    f.bytes += bytes;
    f.ideal_units += (bytes + WAVEFRONT_BYTES - 1) / WAVEFRONT_BYTES;
}

static void measure(const instruction &in)
{
    dcp_cuda_cpu_memory_figures &f = running->figures.memory[in.memory_class];
    for (const request &r : in.requests) {
        if (r.lanes.empty()) continue;
        f.requests++;
        if (in.memory_class < DCP_CUDA_CPU_FIRST_SHARED_CLASS)
            measure_global(r, f, running->sectors);
        else
            measure_shared(r, in.memory_class, f);
    }
}

/* The warp's requests so far are complete: measured, forgotten. */
static void flush_warp(int warp)
{
    for (auto &entry : warps[warp].instructions) measure(entry.second);
    warps[warp].instructions.clear();
}

/* ------------------------------------------------------------------ the executor's hooks */

void dcp_cuda_cpu_profile_launch(const void *function, const char *name, dim3 grid, dim3 block,
                                 size_t shared)
{
    auto found = kernel_index.find(function);
    if (found == kernel_index.end()) {
        found = kernel_index.emplace(function, kernels.size()).first;
        kernels.emplace_back();
        dcp_cuda_cpu_kernel_profile &f = kernels.back().figures;
        memset(&f, 0, sizeof f);
        snprintf(f.name, sizeof f.name, "%s", name);
        f.function = function;
    }
    running = &kernels[found->second];
    dcp_cuda_cpu_kernel_profile &f = running->figures;
    f.launches++;
    f.block_threads = block.x * block.y * block.z;
    f.dynamic_shared = shared;
    (void)grid;
}

void dcp_cuda_cpu_profile_block(int block_warps)
{
    memset(covered_end, 0, sizeof covered_end);
    running->figures.blocks++;
    running->figures.warps += (uint64_t)block_warps;
}

void dcp_cuda_cpu_profile_block_end(void)
{
    for (int w = 0; w < MAX_WARPS; w++) flush_warp(w);
}

void dcp_cuda_cpu_profile_sync(uint32_t synced_warps)
{
    for (int w = 0; w < MAX_WARPS; w++)
        if (synced_warps >> w & 1) flush_warp(w);
}

void dcp_cuda_cpu_profile_event(int what, int warps_taking_part)
{
    dcp_cuda_cpu_kernel_profile &f = running->figures;
    (what == DCP_CUDA_CPU_EVENT_MMA         ? f.mma
     : what == DCP_CUDA_CPU_EVENT_BARRIER   ? f.barriers
                                            : f.collectives) += (uint64_t)warps_taking_part;
}

void dcp_cuda_cpu_profile_access(uintptr_t address, size_t bytes, int memory_class, uintptr_t pc)
{
    const int t = dcp_cuda_cpu_running_thread();
    if (t < 0 || !running || bytes == 0) return;
    const int warp = t / DCP_CUDA_CPU_WARP_SIZE, lane = t % DCP_CUDA_CPU_WARP_SIZE;
    instruction &in = warps[warp].instructions[(uint64_t)pc * DCP_CUDA_CPU_MEMORY_CLASSES +
                                               (uint64_t)memory_class];
    in.memory_class = memory_class;
    const uint32_t k = in.executions[lane]++;
    if (k >= in.requests.size()) in.requests.resize(k + 1);
    in.requests[k].lanes.push_back({address, (uint32_t)bytes, (uint32_t)lane});
}

void dcp_cuda_cpu_profile_wide(uintptr_t address, size_t bytes, int memory_class, uintptr_t pc)
{
    const int t = dcp_cuda_cpu_running_thread();
    if (t < 0) return;
    dcp_cuda_cpu_profile_access(address, bytes, memory_class, pc);
    covered_begin[t] = address, covered_end[t] = address + bytes;
}

bool dcp_cuda_cpu_profile_split(uintptr_t address, size_t bytes)
{
    const int t = dcp_cuda_cpu_running_thread();
    if (t < 0) return false;
    if (address >= covered_begin[t] && address + bytes <= covered_end[t]) return true;
    covered_end[t] = 0; /* the thread moved on */
    return false;
}

/* --------------------------------------------------------------------- the interface */

void dcp_cuda_cpu_profile_begin(void)
{
    kernels.clear();
    kernel_index.clear();
    running = nullptr;
    dcp_cuda_cpu_profiling = true;
}

void dcp_cuda_cpu_profile_pause(bool paused)
{
    cudaDeviceSynchronize(); /* grids run at synchronisations: those enqueued so far, as before */
    dcp_cuda_cpu_profiling = !paused;
}

int dcp_cuda_cpu_profile_end(dcp_cuda_cpu_kernel_profile *out, int capacity)
{
    cudaDeviceSynchronize(); /* the grids enqueued so far run */
    dcp_cuda_cpu_profiling = false;
    running = nullptr;
    for (size_t i = 0; i < kernels.size() && (int)i < capacity; i++) {
        kernels[i].figures.dram_bytes = (uint64_t)kernels[i].sectors.size() * SECTOR_BYTES;
        out[i] = kernels[i].figures;
    }
    return (int)kernels.size();
}
