/* kallsyms lookup strategies (b)-(d) as ARM code, run by `armload bench kallsyms-arm` in the
 * emulator against the real tables mapped from the Debian Image (strategy (a) is the kernel's
 * own kallsyms_lookup_name). Freestanding: no libc; built with arm-linux-gnueabihf-gcc.
 *   (b) linear scan comparing a query compressed with the kernel's token table (by the caller)
 *   (c) binary search over kallsyms_seqs_of_names, expanding each probed name in full
 *   (d) the same binary search, comparing token by token without expanding
 *   (e) seed 000 complete: (d) through a per-batch u32 index of record offsets, filled by
 *       kallsyms_lookup_batch_start() in one pass over kallsyms_names and dropped by
 *       kallsyms_lookup_batch_end(): no marker walk per probed name
 */
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;

struct tables {
	const u8 *names;
	const u32 *markers;
	const u8 *token_table;
	const u16 *token_index;
	const u32 *offsets;
	u32 relative_base;
	u32 num_syms;
	const u8 *seqs;
};

static const u8 *record(const struct tables *t, const u8 *p, u32 *len)
{
	u32 n = *p++;
	if (n & 0x80)
		n = (n & 0x7f) | (*p++ << 7);
	*len = n;
	return p;
}

static u32 symbol_offset(const struct tables *t, u32 pos)
{
	const u8 *p = &t->names[t->markers[pos >> 8]];
	u32 i, len;

	for (i = 0; i < (pos & 0xff); i++) {
		p = record(t, p, &len);
		p += len;
	}
	return p - t->names;
}

static u32 sym_address(const struct tables *t, u32 idx)
{
	return t->relative_base + t->offsets[idx];
}

static u32 seq_at(const struct tables *t, u32 i)
{
	const u8 *s = t->seqs + 3 * i;
	return (s[0] << 16) | (s[1] << 8) | s[2];
}

static void expand(const struct tables *t, u32 off, char *out, u32 max)
{
	u32 len;
	const u8 *p = record(t, &t->names[off], &len);
	int skipped = 0;

	while (len--) {
		const u8 *tok = &t->token_table[t->token_index[*p++]];
		for (; *tok; tok++) {
			if (!skipped) {
				skipped = 1;	/* the type character */
				continue;
			}
			if (max > 1) {
				*out++ = *tok;
				max--;
			}
		}
	}
	*out = 0;
}

static int cmp_str(const char *a, const char *b)
{
	while (*a && *a == *b) {
		a++;
		b++;
	}
	return (u8)*a - (u8)*b;
}

/* the query against a symbol's token stream, token by token (no expansion) */
static int cmp_tokens(const struct tables *t, u32 off, const char *q)
{
	u32 len;
	const u8 *p = record(t, &t->names[off], &len);
	int skipped = 0;

	while (len--) {
		const u8 *tok = &t->token_table[t->token_index[*p++]];
		for (; *tok; tok++) {
			if (!skipped) {
				skipped = 1;
				continue;
			}
			if ((u8)*q != *tok)
				return (u8)*q - *tok;
			q++;
		}
	}
	return (u8)*q;
}

u32 lookup_b(const struct tables *t, const u8 *cq, u32 cqlen)
{
	const u8 *p = t->names;
	u32 i, len, k;

	for (i = 0; i < t->num_syms; i++) {
		const u8 *r = record(t, p, &len);
		if (len == cqlen) {
			for (k = 0; k < len && r[k] == cq[k]; k++)
				;
			if (k == len)
				return sym_address(t, i);
		}
		p = r + len;
	}
	return 0;
}

static u32 bsearch_syms(const struct tables *t, const char *name, int tokens)
{
	char buf[512];
	u32 lo = 0, hi = t->num_syms;

	while (lo < hi) {
		u32 mid = lo + (hi - lo) / 2, seq = seq_at(t, mid);
		int r;
		if (tokens) {
			r = cmp_tokens(t, symbol_offset(t, seq), name);
			r = -r;
		} else {
			expand(t, symbol_offset(t, seq), buf, sizeof(buf));
			r = cmp_str(buf, name);
		}
		if (r < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < t->num_syms) {
		u32 seq = seq_at(t, lo);
		if (tokens ? cmp_tokens(t, symbol_offset(t, seq), name) == 0 :
		    (expand(t, symbol_offset(t, seq), buf, sizeof(buf)), cmp_str(buf, name) == 0))
			return sym_address(t, seq);
	}
	return 0;
}

u32 lookup_c(const struct tables *t, const char *name)
{
	return bsearch_syms(t, name, 0);
}

u32 lookup_d(const struct tables *t, const char *name)
{
	return bsearch_syms(t, name, 1);
}

/* seed 000, patch 2: the per-batch index (one u32 per symbol: its record's offset in names) */
u32 kallsyms_lookup_batch_start(const struct tables *t, u32 *index)
{
	const u8 *p = t->names;
	u32 i, len;

	for (i = 0; i < t->num_syms; i++) {
		index[i] = p - t->names;
		p = record(t, p, &len);
		p += len;
	}
	return i;
}

void kallsyms_lookup_batch_end(const struct tables *t, u32 *index)
{
	index[0] = 0;		/* the caller frees it; nothing survives the batch */
}

u32 lookup_e(const struct tables *t, const u32 *index, const char *name)
{
	u32 lo = 0, hi = t->num_syms;

	while (lo < hi) {
		u32 mid = lo + (hi - lo) / 2;
		if (cmp_tokens(t, index[seq_at(t, mid)], name) > 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < t->num_syms) {
		u32 seq = seq_at(t, lo);
		if (cmp_tokens(t, index[seq], name) == 0)
			return sym_address(t, seq);
	}
	return 0;
}
