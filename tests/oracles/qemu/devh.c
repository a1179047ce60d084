/* The guest side of the QEMU oracle's device I/O: runs a plan of file operations in one process,
 * one system call (or, for cat/echo, what cat and a shell's `echo V > P` make) per line, and prints
 * each raw result:  "@@OP <index> <op> <result> <hex|->"  (result: the return value, or -errno).
 * Plan lines (armload run's options without the dashes):
 *   open PATH | write s:TEXT|b:HEX|buf:N | read N | lseek OFF[:set|cur|end] | ioctl CMD ARG |
 *   poll | mmap N | close | cat PATH | echo VALUE PATH
 * ioctl's ARG is an integer or a user buffer (s:/b:/buf:), printed after the call; poll asks for
 * POLLIN|POLLPRI|POLLOUT with timeout 0 and prints revents; mmap maps N bytes (PROT_READ|
 * PROT_WRITE, MAP_SHARED) and prints what loads from the mapping read. A file operation with no
 * open file prints "skip". The indices start at FIRST-INDEX (default 0). Built static for armhf
 * (make qemu-devio). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

static unsigned char buf[65536];

static void hex(const unsigned char *p, long n)
{
	long i;

	if (n <= 0) {
		printf(" -");
		return;
	}
	putchar(' ');
	for (i = 0; i < n; i++)
		printf("%02x", p[i]);
}

static long bytes_of(const char *spec, unsigned char *out)
{
	long n = 0;

	if (!strncmp(spec, "s:", 2)) {
		n = strlen(spec + 2);
		memcpy(out, spec + 2, n);
	} else if (!strncmp(spec, "b:", 2)) {
		for (spec += 2; spec[0] && spec[1]; spec += 2) {
			unsigned int v;
			sscanf(spec, "%2x", &v);
			out[n++] = v;
		}
	} else if (!strncmp(spec, "buf:", 4)) {
		n = atol(spec + 4);
		memset(out, 0, n);
	}
	return n;
}

static long res(long r)
{
	return r < 0 ? -errno : r;
}

int main(int argc, char **argv)
{
	static char plan[65536];
	char *line, *save;
	int fd = -1, idx;
	FILE *f;

	if (argc < 2 || !(f = fopen(argv[1], "r"))) {
		fprintf(stderr, "usage: devh PLAN [FIRST-INDEX]\n");
		return 2;
	}
	plan[fread(plan, 1, sizeof(plan) - 1, f)] = 0;
	fclose(f);			/* the plan's fd is gone: the first open gets fd 3, as in armload */
	idx = argc > 2 ? atoi(argv[2]) : 0;
	for (line = strtok_r(plan, "\n", &save); line; line = strtok_r(NULL, "\n", &save), idx++) {
		char op[16] = "", a[4096] = "", b[4096] = "";
		long r = 0, n = -1;
		unsigned char *shown = buf;

		sscanf(line, "%15s %4095s %4095s", op, a, b);
		if (strcmp(op, "open") && strcmp(op, "cat") && strcmp(op, "echo") && fd < 0) {
			printf("@@OP %d %s skip\n", idx, op);
			continue;
		}
		errno = 0;
		if (!strcmp(op, "open")) {
			r = res(open(a, O_RDWR));
			fd = r < 0 ? -1 : r;
		} else if (!strcmp(op, "write")) {
			n = bytes_of(a, buf);
			r = res(write(fd, buf, n));
			n = -1;
		} else if (!strcmp(op, "read")) {
			r = res(read(fd, buf, atol(a)));
			n = r;
		} else if (!strcmp(op, "lseek")) {
			char *w = strchr(a, ':');
			int whence = !w ? SEEK_SET : !strcmp(w + 1, "cur") ? SEEK_CUR : SEEK_END;
			r = res(lseek(fd, strtol(a, NULL, 0), whence));
		} else if (!strcmp(op, "ioctl")) {
			unsigned long cmd = strtoul(a, NULL, 0);
			if (b[0] == 's' || b[0] == 'b') {
				n = bytes_of(b, buf);
				r = res(ioctl(fd, cmd, buf));
			} else {
				r = res(ioctl(fd, cmd, strtoul(b, NULL, 0)));
			}
		} else if (!strcmp(op, "poll")) {
			struct pollfd p = { .fd = fd, .events = POLLIN | POLLPRI | POLLOUT };
			r = res(poll(&p, 1, 0));
			if (r >= 0)
				r = p.revents;
		} else if (!strcmp(op, "mmap")) {
			long len = atol(a);
			void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
			if (m == MAP_FAILED) {
				r = -errno;
			} else {
				memcpy(buf, m, len);
				n = len;
			}
		} else if (!strcmp(op, "close")) {
			r = res(close(fd));
			fd = -1;
		} else if (!strcmp(op, "cat")) {
			int c = open(a, O_RDONLY);
			long got;
			r = c < 0 ? -errno : 0;
			while (c >= 0 && r < (long)sizeof(buf) && (got = read(c, buf + r, 4096)) != 0) {
				if (got < 0) {
					r = -errno;
					break;
				}
				r += got;
			}
			if (c >= 0)
				close(c);
			n = r;
		} else if (!strcmp(op, "echo")) {
			int c = open(b, O_WRONLY | O_CREAT | O_TRUNC, 0666);
			size_t len = strlen(a);
			a[len++] = '\n';
			r = c < 0 ? -errno : res(write(c, a, len));
			if (c >= 0)
				close(c);
		} else {
			printf("@@OP %d %s unknown\n", idx, op);
			continue;
		}
		printf("@@OP %d %s %ld", idx, op, r);
		hex(shown, n);
		putchar('\n');
	}
	printf("@@DONE %d\n", idx);
	fflush(stdout);
	return 0;
}
