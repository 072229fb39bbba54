/* cuda_emu_census.cc: the CPU CUDA emulator's census mode (cuda_emu_census.h): launches and products
 * counted by shape, in the order they first appear, and the table of them. */
#include "cuda_emu_census.h"
#include "cuda_emu_internal.h"

#include <stdlib.h>
#include <string.h>
#include <string>
#include <vector>

struct census_row {
    std::string key; /* what is counted: a kernel and its shape, or a product and its shape */
    int kernel;      /* 1: a kernel (blocks, threads meaningful) */
    unsigned long blocks, threads, count;
};

static std::vector<census_row> g_rows;

int cuda_emu_census_on(void)
{
    static int on = -1;
    if (on < 0) {
        const char *v = getenv("CUDA_EMU_CENSUS");
        on = v && strcmp(v, "0") != 0;
    }
    return on;
}

static void count(const std::string &key, int kernel, unsigned long blocks, unsigned long threads)
{
    CUDA_EMU_LOCK;
    for (census_row &r : g_rows)
        if (r.key == key) {
            r.count++;
            return;
        }
    g_rows.push_back(census_row{key, kernel, blocks, threads, 1});
}

void cuda_emu_census_kernel(const char *name, dim3 grid, dim3 block)
{
    char key[256];
    snprintf(key, sizeof key, "%s grid (%u,%u,%u) block (%u,%u,%u)", name, grid.x, grid.y, grid.z, block.x, block.y,
             block.z);
    count(key, 1, (unsigned long)grid.x * grid.y * grid.z, (unsigned long)block.x * block.y * block.z);
}

void cuda_emu_census_product(const char *call, int m, int n, int k, int batch, int bias)
{
    std::string key =
        std::string(call) + " m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k);
    if (batch > 1) key += " batch " + std::to_string(batch);
    if (bias) key += " +bias";
    count(key, 0, 0, 0);
}

void cuda_emu_census_reset(void)
{
    CUDA_EMU_LOCK;
    g_rows.clear();
}

int cuda_emu_census_print(FILE *f, unsigned sms)
{
    CUDA_EMU_LOCK;
    unsigned long launches = 0, products = 0;
    int marked = 0;
    for (const census_row &r : g_rows) (r.kernel ? launches : products) += r.count;
    fprintf(f, "kernels: %lu launches (* fewer than 2 blocks per SM of %u SMs)\n", launches, sms);
    for (const census_row &r : g_rows) {
        if (!r.kernel) continue;
        int few = r.blocks < 2ul * sms;
        marked += few;
        fprintf(f, " %c %4lux %s: %lu blocks of %lu threads\n", few ? '*' : ' ', r.count, r.key.c_str(), r.blocks,
                r.threads);
    }
    fprintf(f, "products: %lu\n", products);
    for (const census_row &r : g_rows)
        if (!r.kernel) fprintf(f, "   %4lux %s\n", r.count, r.key.c_str());
    return marked;
}
