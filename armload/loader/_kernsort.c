/*
 * armload.loader._kernsort: the permutation lib/sort.c applies to a REL table, at native speed.
 *
 * The kernel sorts each exec REL section in place by cmp_rel() (type, then symbol index) with
 * lib/sort.c's heapsort, which is not stable: relocations with equal keys end up in heap order,
 * and that order decides PLT counts and slot reuse when their addends differ.  Both heapsorts are
 * transcribed here step for step (byte offsets become element indices; every comparison and swap
 * is the kernel's, in the kernel's sequence), so the tie order is identical:
 *
 *   variant 0 ("v6"):     the bottom-up heapsort lib/sort.c has had since v5.2 (6.1's sort_r()),
 *   variant 1 ("sorted"): the classic heapsort lib/sort.c had in 2016.
 *
 * Each element is packed as (key << 32 | original index) and compared on the key only, so a swap
 * moves the index with its key exactly as the kernel moves an Elf32_Rel.  armload/loader/plt.py keeps a
 * pure-Python transcription of the same two loops as the fallback when this module is absent;
 * tests/loader/test_plt.py checks both against the literal port of lib/sort.c in the tests.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

#ifndef KERNSORT_SOURCE_SHA256
#define KERNSORT_SOURCE_SHA256 "unknown"
#endif

#define KEY(x) ((uint32_t)((x) >> 32))
#define SWAP(p, q) do { uint64_t t_ = (p); (p) = (q); (q) = t_; } while (0)

/* 6.1 lib/sort.c sort_r(): for (;;) { sift "a" down to a leaf, then backtrack }. */
static void sort_v6(uint64_t *v, size_t num)
{
	size_t n = num, a = num / 2;

	if (!a)				/* num < 2 */
		return;
	for (;;) {
		size_t b, c, d;

		if (a)			/* building heap: sift down --a */
			a--;
		else if (--n)		/* sorting: extract root to --n */
			SWAP(v[0], v[n]);
		else
			break;
		for (b = a; c = 2 * b + 1, (d = c + 1) < n;) {
			__builtin_prefetch(&v[4 * b + 3]);	/* grandchildren: the next level's pair */
			b = KEY(v[c]) >= KEY(v[d]) ? c : d;
		}
		if (d == n)		/* last leaf with no sibling */
			b = c;
		while (b != a && KEY(v[a]) >= KEY(v[b]))
			b = (b - 1) / 2;	/* parent() */
		c = b;
		while (b != a) {
			b = (b - 1) / 2;
			SWAP(v[b], v[c]);
		}
	}
}

/* 2016 lib/sort.c sort(): heapify, then swap the root out and sift down, two compares a level. */
static void sort_2016(uint64_t *v, size_t num)
{
	Py_ssize_t i;
	size_t n = num, c, r;

	if (num < 2)			/* (num/2 - 1) * size < 0: neither loop runs */
		return;
	for (i = (Py_ssize_t)(num / 2) - 1; i >= 0; i--) {
		for (r = (size_t)i; r * 2 + 1 < n; r = c) {
			c = r * 2 + 1;
			if (c < n - 1 && KEY(v[c]) < KEY(v[c + 1]))
				c++;
			if (KEY(v[r]) >= KEY(v[c]))
				break;
			SWAP(v[r], v[c]);
		}
	}
	for (i = (Py_ssize_t)n - 1; i > 0; i--) {
		SWAP(v[0], v[i]);
		for (r = 0; r * 2 + 1 < (size_t)i; r = c) {
			c = r * 2 + 1;
			if (c < (size_t)i - 1 && KEY(v[c]) < KEY(v[c + 1]))
				c++;
			if (KEY(v[r]) >= KEY(v[c]))
				break;
			SWAP(v[r], v[c]);
		}
	}
}

/* order(keys, out, variant): keys a buffer of n uint32, out a writable buffer of n int64. */
static PyObject *kernsort_order(PyObject *self, PyObject *args)
{
	Py_buffer keys, out;
	int variant;
	PyObject *ret = NULL;

	if (!PyArg_ParseTuple(args, "y*w*i", &keys, &out, &variant))
		return NULL;
	/* y* and w* ask for simple (contiguous byte) buffers: only the byte lengths are known. */
	if (keys.len % 4 || out.len != keys.len * 2 || (uint64_t)(keys.len / 4) > UINT32_MAX) {
		PyErr_SetString(PyExc_ValueError, "order(): keys must be n uint32 (n < 2**32), out n int64");
		goto done;
	}
	if (variant != 0 && variant != 1) {
		PyErr_SetString(PyExc_ValueError, "order(): variant must be 0 (v6) or 1 (2016)");
		goto done;
	}
	{
		size_t n = (size_t)(keys.len / 4), i;
		const uint32_t *k = keys.buf;
		int64_t *o = out.buf;
		uint64_t *v = malloc((n ? n : 1) * sizeof(*v));

		if (!v) {
			PyErr_NoMemory();
			goto done;
		}
		Py_BEGIN_ALLOW_THREADS
		for (i = 0; i < n; i++)
			v[i] = ((uint64_t)k[i] << 32) | (uint64_t)i;
		if (variant == 0)
			sort_v6(v, n);
		else
			sort_2016(v, n);
		for (i = 0; i < n; i++)
			o[i] = (int64_t)(uint32_t)v[i];
		Py_END_ALLOW_THREADS
		free(v);
	}
	ret = Py_None;
	Py_INCREF(ret);
done:
	PyBuffer_Release(&keys);
	PyBuffer_Release(&out);
	return ret;
}

static PyMethodDef methods[] = {
	{"order", kernsort_order, METH_VARARGS,
	 "order(keys_u32, out_i64, variant): write lib/sort.c's permutation of keys into out "
	 "(variant 0: 6.1 bottom-up heapsort, 1: 2016 heapsort)."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "armload.loader._kernsort",
	"lib/sort.c's heapsorts (2016 and 6.1), replayed natively for exact REL tie order.", -1, methods,
};

PyMODINIT_FUNC PyInit__kernsort(void)
{
	PyObject *m = PyModule_Create(&module);

	if (m && PyModule_AddStringConstant(m, "SOURCE_SHA256", KERNSORT_SOURCE_SHA256) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
