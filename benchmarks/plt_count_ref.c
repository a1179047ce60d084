/*
 * Native reference for `armload bench`: count_plts() of one relocatable ARM ELF object under the
 * three rules armload models, written the way arch/arm/kernel/module-plts.c does it, with libc
 * qsort() in place of the kernel's lib/sort.c, timed in the same run as armload's count_plts().
 * Shares no code with armload; it only gives the speed a C loader reaches on the same table.
 *
 *   plt_count_ref FILE REPEAT NFIXED
 *
 * For every SHT_REL section whose target is SHF_EXECINSTR: copy the table (the kernel sorts the
 * module's copy in place), then
 *   sorted (2016): qsort by cmp_rel (type, symbol), count branches to SHN_UNDEF symbols, a
 *                  zero-addend entry equal to its predecessor counted once; one .plt;
 *   v6 (6.1):      the same, skipping only symbols defined in the target section, core and init
 *                  (".init*" targets) counted apart, each starting at NFIXED ftrace entries;
 *   legacy (v4.0): every SHT_REL section whatever its target, every branch (no symbol filter),
 *                  one entry per distinct (r_info, masked word at the target's sh_offset +
 *                  r_offset in the file; mask 0x00ffffff for ARM types, 0x2fff07ff for Thumb
 *                  types), init when the REL section's name contains ".init"; here by qsort of
 *                  the pairs instead of the kernel's O(n^2) scan.
 * Prints one line per rule: "RULE CORE INIT BEST_NS" (best of REPEAT runs of that rule's count
 * over all tables, file already in memory).  The counts equal the kernel's only where qsort's tie
 * order does not matter (no branch ties with different addends): qsort is not lib/sort.c.
 */
#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SHT_SYMTAB 2
#define SHT_REL 9
#define SHF_EXECINSTR 0x4
#define SHN_UNDEF 0
#define R_ARM_PC24 1
#define R_ARM_THM_CALL 10
#define R_ARM_CALL 28
#define R_ARM_JUMP24 29
#define R_ARM_THM_JUMP24 30
#define ELF32_R_SYM(i) ((i) >> 8)
#define ELF32_R_TYPE(i) ((i) & 0xff)

typedef struct { uint32_t r_offset, r_info; } Elf32_Rel;

struct table {
	const Elf32_Rel *rels;	/* in the file */
	size_t num;
	uint32_t dstidx;
	int init;
	const uint8_t *base;	/* target section bytes */
	uint32_t base_size;
	int in_file;		/* legacy: words are read anywhere in the file from base (v4.0 does) */
};

static const uint8_t *file;
static size_t file_size;
static const uint8_t *symtab;
static uint32_t symtab_size;

static uint32_t rd32(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }
static uint16_t rd16(const uint8_t *p) { return p[0] | p[1] << 8; }

static uint32_t sym_shndx(uint32_t sym)
{
	uint64_t off = (uint64_t)(symtab - file) + (uint64_t)sym * 16 + 14;

	return off + 2 <= file_size ? rd16(file + off) : 0;
}

static uint32_t word_at(const struct table *t, uint32_t off)
{
	if (t->in_file)
		return t->base && (uint64_t)(t->base - file) + off + 4 <= file_size ? rd32(t->base + off) : 0;
	return (uint64_t)off + 4 <= t->base_size ? rd32(t->base + off) : 0;
}

#define cmp_3way(a, b) ((a) < (b) ? -1 : (a) > (b))

static int cmp_rel(const void *a, const void *b)
{
	const Elf32_Rel *x = a, *y = b;
	int i = cmp_3way(ELF32_R_TYPE(x->r_info), ELF32_R_TYPE(y->r_info));

	if (i == 0)
		i = cmp_3way(ELF32_R_SYM(x->r_info), ELF32_R_SYM(y->r_info));
	return i;
}

static int is_thumb(uint32_t type) { return type == R_ARM_THM_CALL || type == R_ARM_THM_JUMP24; }

static int is_branch(uint32_t type)
{
	return type == R_ARM_CALL || type == R_ARM_PC24 || type == R_ARM_JUMP24 || is_thumb(type);
}

static int is_zero_addend_relocation(const struct table *t, const Elf32_Rel *rel)
{
	uint32_t w = word_at(t, rel->r_offset);

	if (is_thumb(ELF32_R_TYPE(rel->r_info))) {
		uint16_t upper = w & 0xffff, lower = w >> 16;

		return (upper & 0x07ff) == 0x07ff && (lower & 0x2fff) == 0x2ffe;
	}
	return (w & 0x00ffffff) == 0x00fffffe;
}

static int duplicate_rel(const struct table *t, const Elf32_Rel *rel, int num)
{
	const Elf32_Rel *prev = rel + num - 1;

	return num && cmp_rel(rel + num, prev) == 0 && is_zero_addend_relocation(t, prev);
}

static unsigned count_plts(const struct table *t, const Elf32_Rel *rel, int v6)
{
	unsigned ret = 0;

	for (size_t i = 0; i < t->num; i++) {
		uint32_t shndx;

		if (!is_branch(ELF32_R_TYPE(rel[i].r_info)))
			continue;
		shndx = sym_shndx(ELF32_R_SYM(rel[i].r_info));
		if (v6 ? shndx == t->dstidx : shndx != SHN_UNDEF)
			continue;
		if (!is_zero_addend_relocation(t, rel + i) || !duplicate_rel(t, rel, (int)i))
			ret++;
	}
	return ret;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return cmp_3way(x, y);
}

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	FILE *f;
	long sz;
	uint32_t shoff, shnum, shentsize;
	struct table *tabs, *ltabs;
	size_t ntabs = 0, nltabs = 0, maxnum = 0;
	int repeat, nfixed;
	Elf32_Rel *work;
	uint64_t *pairs;

	if (argc != 4) {
		fprintf(stderr, "usage: %s FILE REPEAT NFIXED\n", argv[0]);
		return 2;
	}
	repeat = atoi(argv[2]);
	nfixed = atoi(argv[3]);
	f = fopen(argv[1], "rb");
	if (!f || fseek(f, 0, SEEK_END) || (sz = ftell(f)) < 52 || fseek(f, 0, SEEK_SET)) {
		fprintf(stderr, "%s: cannot read\n", argv[1]);
		return 1;
	}
	file_size = (size_t)sz;
	file = malloc(file_size);
	if (!file || fread((void *)file, 1, file_size, f) != file_size) {
		fprintf(stderr, "%s: cannot read\n", argv[1]);
		return 1;
	}
	fclose(f);
	shoff = rd32(file + 0x20);
	shentsize = rd16(file + 0x2e);
	shnum = rd16(file + 0x30);
	if (shentsize != 40 || (uint64_t)shoff + (uint64_t)shnum * 40 > file_size) {
		fprintf(stderr, "%s: bad section headers\n", argv[1]);
		return 1;
	}
	const uint8_t *sh = file + shoff;
	uint32_t shstrndx = rd16(file + 0x32);
	const uint8_t *shstr = shstrndx < shnum ? file + rd32(sh + shstrndx * 40 + 16) : NULL;

	tabs = calloc(shnum ? shnum : 1, sizeof(*tabs));
	ltabs = calloc(shnum ? shnum : 1, sizeof(*ltabs));
	for (uint32_t i = 1; i < shnum; i++) {
		const uint8_t *s = sh + i * 40;

		if (rd32(s + 4) == SHT_SYMTAB) {
			symtab = file + rd32(s + 16);
			symtab_size = rd32(s + 20);
		}
	}
	if (!symtab) {
		fprintf(stderr, "%s: no symbol table\n", argv[1]);
		return 1;
	}
	for (uint32_t i = 1; i < shnum; i++) {
		const uint8_t *s = sh + i * 40, *d;
		uint32_t info = rd32(s + 28);

		if (rd32(s + 4) != SHT_REL || info >= shnum)
			continue;
		d = sh + info * 40;
		if ((uint64_t)rd32(s + 16) + rd32(s + 20) > file_size) {
			fprintf(stderr, "%s: section %u out of the file\n", argv[1], i);
			return 1;
		}
		ltabs[nltabs].rels = (const Elf32_Rel *)(file + rd32(s + 16));
		ltabs[nltabs].num = rd32(s + 20) / sizeof(Elf32_Rel);
		ltabs[nltabs].init = shstr && strstr((const char *)shstr + rd32(s), ".init") != NULL;
		/* section 0 keeps sh_addr 0 in the kernel: no word is read (0 stands in) */
		ltabs[nltabs].base = info && rd32(d + 16) <= file_size ? file + rd32(d + 16) : NULL;
		ltabs[nltabs].in_file = 1;
		if (ltabs[nltabs].num > maxnum)
			maxnum = ltabs[nltabs].num;
		nltabs++;
		if (!(rd32(d + 8) & SHF_EXECINSTR))
			continue;
		if ((uint64_t)rd32(s + 16) + rd32(s + 20) > file_size || (uint64_t)rd32(d + 16) + rd32(d + 20) > file_size) {
			fprintf(stderr, "%s: section %u out of the file\n", argv[1], i);
			return 1;
		}
		tabs[ntabs].rels = (const Elf32_Rel *)(file + rd32(s + 16));
		tabs[ntabs].num = rd32(s + 20) / sizeof(Elf32_Rel);
		tabs[ntabs].dstidx = info;
		tabs[ntabs].init = shstr && strncmp((const char *)shstr + rd32(d), ".init", 5) == 0;
		tabs[ntabs].base = file + rd32(d + 16);
		tabs[ntabs].base_size = rd32(d + 20);
		if (tabs[ntabs].num > maxnum)
			maxnum = tabs[ntabs].num;
		ntabs++;
	}
	work = malloc((maxnum ? maxnum : 1) * sizeof(*work));
	pairs = malloc((maxnum ? maxnum : 1) * sizeof(*pairs));

	for (int rule = 0; rule < 3; rule++) {		/* 0 legacy, 1 sorted, 2 v6 */
		static const char *names[] = {"legacy", "sorted", "v6"};
		double best = 0;
		unsigned core = 0, init = 0;

		for (int r = 0; r < repeat; r++) {
			double t0 = now_ns();

			core = init = 0;
			for (size_t k = 0; rule == 0 && k < nltabs; k++) {
				const struct table *t = ltabs + k;
				size_t m = 0;
				unsigned n = 0;

				for (size_t i = 0; i < t->num; i++) {
					uint32_t ri = t->rels[i].r_info;
					uint32_t mask = is_thumb(ELF32_R_TYPE(ri)) ? 0x2fff07ff : 0x00ffffff;

					if (is_branch(ELF32_R_TYPE(ri)))
						pairs[m++] = (uint64_t)ri << 32 | (word_at(t, t->rels[i].r_offset) & mask);
				}
				qsort(pairs, m, sizeof(*pairs), cmp_u64);
				for (size_t i = 0; i < m; i++)
					n += !i || pairs[i] != pairs[i - 1];
				if (t->init)
					init += n;
				else
					core += n;
			}
			for (size_t k = 0; rule && k < ntabs; k++) {
				const struct table *t = tabs + k;

				memcpy(work, t->rels, t->num * sizeof(*work));
				qsort(work, t->num, sizeof(*work), cmp_rel);
				if (rule == 2 && t->init)
					init += count_plts(t, work, 1);
				else
					core += count_plts(t, work, rule == 2);
			}
			if (rule == 2) {
				core += nfixed;
				init += nfixed;
			}
			double dt = now_ns() - t0;
			if (r == 0 || dt < best)
				best = dt;
		}
		printf("%s %u %u %.0f\n", names[rule], core, init, best);
	}
	return 0;
}
