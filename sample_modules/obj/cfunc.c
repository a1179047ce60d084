// SPDX-License-Identifier: GPL-2.0
/* A small kernel-style C file for relocation oracle tests (compiled -O2 -fno-pic). */
extern int ext_counter;
extern int ext_log(const char *fmt, ...);
extern void *ext_alloc(unsigned long size, unsigned int flags);
extern void ext_free(const void *p);

struct cfunc_ops {
	int (*op)(int, int);
	const char *name;
};

static int cf_add(int a, int b) { return a + b; }
static int cf_sub(int a, int b) { return a - b; }

static const struct cfunc_ops cfunc_table[] = {
	{ cf_add, "add" },
	{ cf_sub, "sub" },
};

int cfunc_state[8];
const char *cfunc_banner = "cfunc ready";

__attribute__((noinline)) int cfunc_apply(int i, int a, int b)
{
	const struct cfunc_ops *o = &cfunc_table[i & 1];

	ext_counter++;
	ext_log("%s(%d,%d)\n", o->name, a, b);
	return o->op(a, b);
}

int cfunc_run(int n)
{
	int *buf = ext_alloc(n * sizeof(int), 0xcc0);
	int i, s = 0;

	if (!buf)
		return -12;
	for (i = 0; i < n; i++) {
		buf[i] = cfunc_apply(i, i, cfunc_state[i & 7]);
		s += buf[i];
	}
	ext_free(buf);
	ext_log("%s: %d\n", cfunc_banner, s);
	return ext_log("done\n");	/* tail call: JUMP24 */
}
