/* Coverage block hook for armload (armload/emu/coverage.py): one UC_HOOK_BLOCK per module text
 * section, counting executions of each translation block by its start address (halfword index
 * into the section) and remembering the block's size. coverage.py has the same hook in Python
 * for machines without a C compiler.
 */
#include <stdint.h>

typedef struct {
    uint64_t base;
    uint64_t n;            /* halfword slots */
    uint32_t *count;
    uint32_t *size;
} cov_t;

void armload_cov_block(void *uc, uint64_t addr, uint32_t size, void *user) {
    cov_t *c = (cov_t *)user;
    uint64_t i = (addr - c->base) >> 1;
    (void)uc;
    if (i < c->n) {
        c->count[i]++;
        c->size[i] = size;
    }
}
