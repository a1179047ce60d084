/* The guest side of the QEMU oracle: one system call per command, its raw result on one line.
 *   modh ins PATH   finit_module(fd, "", 0)        -> "@@INS <ret> <errno>"
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
		ret = syscall(SYS_finit_module, fd, "", 0);
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
