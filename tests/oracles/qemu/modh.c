/* The guest side of the QEMU oracle: one system call per command, its raw result on one line.
 *   modh ins PATH   finit_module(fd, "", flags)    -> "@@INS <ret> <errno>"
 *                   flags: MODULE_INIT_COMPRESSED_FILE when the file starts with the xz, zstd or
 *                   gzip magic (6.12's .ko.xz): the kernel decompresses it, as kmod asks it to when
 *                   /sys/module/compression names the format (kernel/module/main.c: idempotent_init_module,
 *                   kernel/module/decompress.c: module_decompress)
 *   modh rm NAME    delete_module(NAME, O_NONBLOCK) -> "@@RM <ret> <errno>"
 * The exit status is 0 or the errno (at most 127).
 * busybox insmod prints only strerror text; this gives the errno number the kernel returned
 * (kernel/module/main.c: finit_module -> load_module -> do_init_module). Built static for armhf. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MODULE_INIT_COMPRESSED_FILE 4	/* include/uapi/linux/module.h (5.17+) */

static int compressed(int fd)
{
	static const unsigned char xz[] = {0xfd, '7', 'z', 'X', 'Z', 0}, zstd[] = {0x28, 0xb5, 0x2f, 0xfd};
	unsigned char m[6] = {0};
	ssize_t n = pread(fd, m, sizeof m, 0);
	return (n >= 6 && !memcmp(m, xz, 6)) || (n >= 4 && !memcmp(m, zstd, 4)) ||
	       (n >= 2 && m[0] == 0x1f && m[1] == 0x8b);
}

int main(int argc, char **argv)
{
	long ret;
	if (argc != 3) {
		fprintf(stderr, "usage: modh ins PATH | modh rm NAME\n");
		return 2;
	}
	if (!strcmp(argv[1], "ins")) {
		int fd = open(argv[2], O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			printf("@@INS -1 %d open\n", errno);
			return 1;
		}
		ret = syscall(SYS_finit_module, fd, "", compressed(fd) ? MODULE_INIT_COMPRESSED_FILE : 0);
		printf("@@INS %ld %d\n", ret, ret < 0 ? errno : 0);
	} else if (!strcmp(argv[1], "rm")) {
		ret = syscall(SYS_delete_module, argv[2], O_NONBLOCK);
		printf("@@RM %ld %d\n", ret, ret < 0 ? errno : 0);
	} else {
		fprintf(stderr, "modh: unknown command %s\n", argv[1]);
		return 2;
	}
	fflush(stdout);
	return ret < 0 ? (errno & 0x7f ? errno & 0x7f : 1) : 0;   /* the shell sees the errno (EEXIST: 17) */
}
