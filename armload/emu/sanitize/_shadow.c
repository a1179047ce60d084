/* The sanitizers' code hook on module text, in C (armload/emu/sanitize/native.py loads it).
 *
 * One UC_HOOK_CODE per module allocation. For each module instruction: a flagged address (an
 * allocator or trylock returning to the module) goes to Python; an ARM load/store is decoded
 * (LDR/STR{B,H,SB,SH,D,EX*}, LDM/STM not on sp), its condition tested, its address computed
 * from the registers, and checked against the heap shadow (sorted tracked objects: a live one's
 * requested end and extent, or freed); only a bad access, a halfword or word store to one of
 * the module's spin/rwlocks, or (with DWARF frames) a pointer access into the stack calls Python. The
 * Python hook in engine.py does the same (access.py) where no C compiler is available.
 */
#include <stdint.h>
#include "../arm_cond.h"

typedef void uc_engine;
typedef int (*reg_read_fn)(uc_engine *, int, void *);
typedef int (*reg_write_fn)(uc_engine *, int, const void *);
typedef void (*event_fn)(uint32_t kind, uint32_t pc, uint32_t ea, uint32_t size, uint32_t write, uint32_t base);

#define REG_R0 66
#define REG_SP 12
#define REG_PC 11
#define REG_CPSR 3
#define MAX_SPINS 64

enum { EV_FLAG = 1, EV_HEAP = 2, EV_SPIN = 3, EV_STACK = 4 };
struct filters;
static int module_call(uc_engine *uc, struct filters *f, const uint32_t *text, uint32_t base, uint32_t nwords,
                       uint32_t pc, uint32_t w);

typedef struct {
    uint32_t base, nwords;       /* the hooked allocation */
    const uint32_t *text;        /* its instruction words (copied when the module is formed) */
    uint8_t *flags;              /* per word: 1 = call Python (a pending return) */
    /* heap shadow, sorted by start (shared with heap.py's HeapShadow through numpy) */
    const uint32_t *starts, *req_end, *ext_end;
    const uint8_t *freed;
    uint32_t nobj, lo, hi;
    uint32_t spins[MAX_SPINS];
    uint32_t nspins;
    uint32_t stack_check;        /* the module has DWARF stack arrays */
    reg_read_fn reg_read;
    event_fn event;
    uint64_t accesses;
    struct filters *filters;     /* the entry points recognised at the module's calls (below) */
} shadow_t;

uint32_t armload_shadow_size(void) { return (uint32_t)sizeof(shadow_t); }

static uint32_t reg(uc_engine *uc, shadow_t *s, int r) {
    uint32_t v = 0;
    int id = r == 13 ? REG_SP : r == 14 ? 10 : r == 15 ? REG_PC : REG_R0 + r;
    s->reg_read(uc, id, &v);
    return v;
}

/* the access of word w at pc: returns size (0: none), sets *ea, *write, *basereg */
static uint32_t decode(uc_engine *uc, shadow_t *s, uint32_t w, uint32_t *ea, uint32_t *write, uint32_t *basereg) {
    uint32_t op = (w >> 25) & 7, rn = (w >> 16) & 15, p = (w >> 24) & 1, u = (w >> 23) & 1, l = (w >> 20) & 1;
    uint32_t b, off, size;
    if (op == 2 || op == 3) {                       /* LDR/STR{B} immediate or register */
        if (op == 3 && (w & 0x10))
            return 0;                               /* media instructions */
        if (rn == 15)
            return 0;
        size = (w & (1 << 22)) ? 1 : 4;
        if (op == 2) {
            off = w & 0xFFF;
        } else {
            uint32_t sh = (w >> 7) & 31, type = (w >> 5) & 3;
            if (type != 0)
                return 0;
            off = reg(uc, s, w & 15) << sh;
        }
        b = reg(uc, s, rn);
        *ea = p ? (u ? b + off : b - off) : b;
        *write = !l;
        *basereg = rn;
        return size;
    }
    if (op == 0 && (w & 0x90) == 0x90 && (w & 0x60)) {   /* extra load/store: H, SB, SH, D */
        uint32_t sh = (w >> 5) & 3;
        if (rn == 15)
            return 0;
        if (!p && (w & (1 << 21)))
            return 0;                               /* LDRHT etc. (user access) */
        off = (w & (1 << 22)) ? (((w >> 4) & 0xF0) | (w & 0xF)) : reg(uc, s, w & 15);
        b = reg(uc, s, rn);
        *ea = p ? (u ? b + off : b - off) : b;
        *basereg = rn;
        if (sh == 1) { *write = !l; return 2; }
        if (!l) { *write = sh == 3; return 8; }        /* LDRD (sh 2) / STRD (sh 3) */
        *write = 0;
        return sh == 2 ? 1 : 2;
    }
    if (op == 0 && (w & 0x0F8000F0) == 0x01800090) {     /* LDREX/STREX (and B/H/D variants; bit 20: L) */
        static const uint32_t sz[4] = {4, 8, 1, 2};
        if (rn == 15)
            return 0;
        *ea = reg(uc, s, rn);
        *write = !l;
        *basereg = rn;
        return sz[(w >> 21) & 3];
    }
    if (op == 4) {                                  /* LDM/STM */
        uint32_t list = w & 0xFFFF, n = 0, i;
        if (rn == 13 || rn == 15)
            return 0;
        for (i = 0; i < 16; i++)
            n += (list >> i) & 1;
        if (!n)
            return 0;
        b = reg(uc, s, rn);
        if (u)
            *ea = p ? b + 4 : b;
        else
            *ea = p ? b - 4 * n : b - 4 * (n - 1);
        *write = !l;
        *basereg = rn;
        return 4 * n;
    }
    return 0;
}

static int heap_bad(shadow_t *s, uint32_t ea, uint32_t size) {
    uint32_t lo = 0, hi = s->nobj, end = ea + size;
    if (!s->nobj || end <= s->lo || ea >= s->hi)
        return 0;
    while (lo < hi) {                               /* first start > ea */
        uint32_t mid = (lo + hi) / 2;
        if (s->starts[mid] <= ea) lo = mid + 1; else hi = mid;
    }
    if (lo > 0) {
        uint32_t i = lo - 1;
        if (ea < s->ext_end[i] && (s->freed[i] || end > s->req_end[i]))
            return 1;
    }
    if (lo < s->nobj && end > s->starts[lo] && s->freed[lo])
        return 1;                                   /* runs into a freed object from below */
    return 0;
}

void armload_shadow_code(uc_engine *uc, uint64_t address, uint32_t isize, void *user) {
    shadow_t *s = (shadow_t *)user;
    uint32_t i = (uint32_t)(address - s->base) >> 2, w, ea = 0, write = 0, basereg = 0, size, k;
    if (i >= s->nwords || isize != 4)
        return;
    if (s->flags[i])
        s->event(EV_FLAG, (uint32_t)address, 0, 0, 0, 0);
    w = s->text[i];
    if ((w >> 28) == 15)
        return;
    if (s->filters && module_call(uc, s->filters, s->text, s->base, s->nwords, (uint32_t)address, w))
        return;
    if (((w >> 25) & 7) == 1 || ((w >> 25) & 7) > 4 || (((w >> 25) & 7) == 0 && (w & 0x90) != 0x90))
        return;                                     /* data processing, branches, coprocessor */
    if ((w >> 28) != 14) {
        uint32_t cpsr = 0;
        s->reg_read(uc, REG_CPSR, &cpsr);
        if (!arm_cond_passed(w >> 28, cpsr))
            return;
    }
    size = decode(uc, s, w, &ea, &write, &basereg);
    if (!size)
        return;
    s->accesses++;
    if (heap_bad(s, ea, size))
        s->event(EV_HEAP, (uint32_t)address, ea, size, write, basereg);
    if (write && (size == 2 || size == 4))         /* an inlined spin/read/write_unlock (locks.py) */
        for (k = 0; k < s->nspins; k++)
            if (s->spins[k] == ea) {
                s->event(EV_SPIN, (uint32_t)address, ea, size, write, basereg);
                break;
            }
    if (s->stack_check && basereg != 13) {
        uint32_t sp = reg(uc, s, 13);
        if (ea >= sp && ea < (sp | 0x1FFF) + 1)
            s->event(EV_STACK, (uint32_t)address, ea, size, write, basereg);
    }
}

/* Entry filters: a code hook at a kernel function's entry that calls Python only when the call
 * matters to the sanitizers (the kernel calls kfree, mutex_lock, schedule... all the time). */
#define MAX_RANGES 32
enum { F_LR = 1, F_LR_OR_HELD = 2, F_PTR = 3, F_LR_OR_FREED = 4, F_ALWAYS = 5, F_LR_OR_HELD_ANY = 6 };

typedef struct filters {
    uint32_t lo[MAX_RANGES], hi[MAX_RANGES];   /* the module allocations */
    uint32_t nranges;
    uint32_t heap_lo, heap_hi;                 /* bounds of the tracked objects */
    uint32_t freed;                            /* freed objects not yet known reused */
    uint32_t held;                             /* module spinlocks held */
    reg_read_fn reg_read;
    void (*call)(uint32_t id);
    uint64_t calls, filtered;
    reg_write_fn reg_write;
    const struct centry *ctbl;                 /* entry points without a hook, sorted by address */
    uint32_t nctbl;
    uint64_t recognised;
    uint32_t held_any;                         /* module locks of any kind held (their release by kernel code) */
} filters_t;

typedef struct entry {
    filters_t *f;
    uint32_t mode, arg, id;
    struct entry *next;              /* the next entry at the same address: one Unicorn hook for all */
} entry_t;

typedef struct centry {
    uint32_t addr;
    entry_t *e;
} centry_t;

uint32_t armload_filters_size(void) { return (uint32_t)sizeof(filters_t); }
uint32_t armload_entry_size(void) { return (uint32_t)sizeof(entry_t); }

static int in_module(filters_t *f, uint32_t a) {
    uint32_t k;
    for (k = 0; k < f->nranges; k++)
        if (a >= f->lo[k] && a < f->hi[k])
            return 1;
    return 0;
}

static void entry_filter(uc_engine *uc, entry_t *e) {
    filters_t *f = e->f;
    uint32_t v = 0, go = 0;
    switch (e->mode) {
    case F_ALWAYS: go = 1; break;
    case F_PTR:
        f->reg_read(uc, REG_R0 + e->arg, &v);
        go = v >= f->heap_lo && v < f->heap_hi;
        break;
    default:
        f->reg_read(uc, 10 /* LR */, &v);
        go = in_module(f, v) || (e->mode == F_LR_OR_HELD && f->held) || (e->mode == F_LR_OR_FREED && f->freed) ||
             (e->mode == F_LR_OR_HELD_ANY && f->held_any);
    }
    if (go) {
        f->calls++;
        f->call(e->id);
    } else {
        f->filtered++;
    }
}

void armload_entry_hook(uc_engine *uc, uint64_t address, uint32_t isize, void *user) {
    (void)address; (void)isize;
    for (entry_t *e = (entry_t *)user; e; e = e->next)
        entry_filter(uc, e);
}

/* A module instruction that transfers control to an entry point of the call table (one with
 * no hook of its own: kernel code never reaches it with the module's return address in LR):
 * B/BL imm, BX/BLX reg, or a PLT veneer's `ldr pc, [pc, #imm]`, its condition passing. The
 * branch is done here (LR for the linking ones, then PC: Unicorn goes on at the entry point)
 * and the entry's filter run with the registers the entry would have seen, so without a hook
 * on each entry point (each one would lengthen the list Unicorn walks for every hooked
 * instruction: uc.c helper_uc_tracecode). Returns 1 when it branched. */
static int module_call(uc_engine *uc, filters_t *f, const uint32_t *text, uint32_t base, uint32_t nwords,
                       uint32_t pc, uint32_t w) {
    uint32_t target, link = 0, lo = 0, hi = f->nctbl, v;
    if (!f->nctbl)
        return 0;
    if (((w >> 25) & 7) == 5) {                             /* B, BL */
        int32_t imm = (int32_t)(w << 8) >> 6;
        target = pc + 8 + (uint32_t)imm;
        link = (w >> 24) & 1;
    } else if ((w & 0x0FFFFFD0) == 0x012FFF10) {            /* BX, BLX register */
        uint32_t rm = w & 15;
        v = 0;
        if (rm == 15)
            return 0;
        f->reg_read(uc, rm == 13 ? REG_SP : rm == 14 ? 10 : REG_R0 + rm, &v);
        if (v & 1)
            return 0;                                      /* to Thumb: not an entry of the table */
        target = v;
        link = (w >> 5) & 1;
    } else if ((w & 0x0F7FF000) == 0x051FF000) {            /* LDR pc, [pc, #+-imm] (a PLT veneer) */
        uint32_t ea = (w & (1 << 23)) ? pc + 8 + (w & 0xFFF) : pc + 8 - (w & 0xFFF), k = (ea - base) >> 2;
        if ((ea & 3) || ea < base || k >= nwords)
            return 0;
        target = text[k];
    } else {
        return 0;
    }
    while (lo < hi) {                                       /* first entry >= target */
        uint32_t mid = (lo + hi) / 2;
        if (f->ctbl[mid].addr < target) lo = mid + 1; else hi = mid;
    }
    if (lo >= f->nctbl || f->ctbl[lo].addr != target)
        return 0;
    if ((w >> 28) != 14) {
        uint32_t cpsr = 0;
        f->reg_read(uc, REG_CPSR, &cpsr);
        if (!arm_cond_passed(w >> 28, cpsr))
            return 0;
    }
    f->recognised++;
    if (link) {
        v = pc + 4;
        f->reg_write(uc, 10 /* LR */, &v);
    }
    f->reg_write(uc, REG_PC, &target);
    for (; lo < f->nctbl && f->ctbl[lo].addr == target; lo++)
        entry_filter(uc, f->ctbl[lo].e);
    return 1;
}
