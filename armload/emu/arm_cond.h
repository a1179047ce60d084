/* The ARM condition check shared by the emulator's C helpers (hw/_c14.c, sanitize/_shadow.c):
 * ConditionPassed() of the ARM Architecture Reference Manual (ARMv7-A/R, A8.3 "Conditional
 * execution"): cond 0-13 tests the N, Z, C, V flags of CPSR, 14 (AL) and 15 always pass
 * (15 is the unconditional space, whose instructions the callers decode themselves). */
#ifndef ARMLOAD_ARM_COND_H
#define ARMLOAD_ARM_COND_H
#include <stdint.h>

static inline int arm_cond_passed(uint32_t cond, uint32_t cpsr) {
    uint32_t n = cpsr >> 31 & 1, z = cpsr >> 30 & 1, c = cpsr >> 29 & 1, v = cpsr >> 28 & 1, r;
    switch (cond >> 1) {
    case 0: r = z; break;                  /* EQ / NE */
    case 1: r = c; break;                  /* CS / CC */
    case 2: r = n; break;                  /* MI / PL */
    case 3: r = v; break;                  /* VS / VC */
    case 4: r = c && !z; break;            /* HI / LS */
    case 5: r = n == v; break;             /* GE / LT */
    case 6: r = !z && n == v; break;       /* GT / LE */
    default: return 1;                     /* AL, and the unconditional space */
    }
    return (cond & 1) ? !r : r;
}
#endif
