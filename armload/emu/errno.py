"""errno names (include/uapi/asm-generic/errno*.h, include/linux/errno.h) and word helpers."""
from __future__ import annotations

ERRNAMES = {1: "EPERM", 2: "ENOENT", 3: "ESRCH", 4: "EINTR", 5: "EIO", 6: "ENXIO", 7: "E2BIG",
            8: "ENOEXEC", 9: "EBADF", 10: "ECHILD", 11: "EAGAIN", 12: "ENOMEM", 13: "EACCES",
            14: "EFAULT", 15: "ENOTBLK", 16: "EBUSY", 17: "EEXIST", 18: "EXDEV", 19: "ENODEV",
            20: "ENOTDIR", 21: "EISDIR", 22: "EINVAL", 23: "ENFILE", 24: "EMFILE", 25: "ENOTTY",
            26: "ETXTBSY", 27: "EFBIG", 28: "ENOSPC", 29: "ESPIPE", 30: "EROFS", 31: "EMLINK",
            32: "EPIPE", 33: "EDOM", 34: "ERANGE", 38: "ENOSYS", 61: "ENODATA", 62: "ETIME",
            71: "EPROTO", 75: "EOVERFLOW", 95: "EOPNOTSUPP", 97: "EAFNOSUPPORT", 98: "EADDRINUSE",
            99: "EADDRNOTAVAIL", 105: "ENOBUFS", 110: "ETIMEDOUT", 111: "ECONNREFUSED",
            512: "ERESTARTSYS", 517: "EPROBE_DEFER", 524: "ENOTSUPP"}

ENOENT, EIO, ENOMEM, EFAULT, EBUSY, EEXIST, ENODEV, EINVAL, ENOSPC = 2, 5, 12, 14, 16, 17, 19, 22, 28
ENOSYS, EOPNOTSUPP, EAFNOSUPPORT, ETIMEDOUT, ENOTSUPP = 38, 95, 97, 110, 524
MAX_ERRNO = 4095


def errno_name(e: int) -> str:
    return ERRNAMES.get(abs(e), str(abs(e)))


def s32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


def s64(v: int) -> int:
    v &= 0xFFFFFFFFFFFFFFFF
    return v - (1 << 64) if v >> 63 else v


def err_ptr(e: int) -> int:
    """ERR_PTR(-e) as a 32-bit word."""
    return (-abs(e)) & 0xFFFFFFFF


def is_err(v: int) -> bool:
    return (v & 0xFFFFFFFF) >= (1 << 32) - MAX_ERRNO
