"""Pseudo-filesystems a module populates at init: debugfs, procfs, sysfs/kobjects, sysctl.

Their real code needs the mounted filesystems (VFS, kernfs) a booted kernel has; these models
keep the tree of names each creates (shown in the registrations), return objects callers only
pass back, refuse duplicates as the kernel does, and free them on removal.
"""
from __future__ import annotations

from ..errno import EEXIST, ENOMEM, err_ptr, is_err
from .base import ModelLibrary

OBJ_SIZE = 0x100


class Tree:
    def __init__(self):
        self.nodes: dict[int, dict] = {}          # object -> {"fs", "path", "parent"}

    def path(self, parent: int, name: str) -> str:
        p = self.nodes.get(parent)
        return f"{p['path']}/{name}" if p else name


def tree(call) -> Tree:
    return call.state("fs.tree", Tree)


def register(lib: ModelLibrary) -> None:
    m = lib.model

    def create(call, fs, name_ptr, parent, kind):
        t = tree(call)
        name = call.text(name_ptr, 256) if name_ptr else "(null)"
        path = t.path(parent, name)
        if any(n["fs"] == fs and n["path"] == path for n in t.nodes.values()):
            if fs == "debugfs":
                call.machine.log.printk(f"debugfs: File '{name}' in directory '{t.path(parent, '') or '/'}' already present!",
                                        level=3)
            return err_ptr(EEXIST) if fs in ("debugfs", "sysfs") else 0
        obj = call.heap.alloc(OBJ_SIZE, zero=True, kind=f"{fs} {kind} {path}", caller=call.lr)
        if not obj:
            return err_ptr(ENOMEM) if fs != "proc" else 0
        t.nodes[obj] = {"fs": fs, "path": path, "parent": parent, "kind": kind}
        call.machine.record(f"{fs}_{kind}", path=path, addr=obj)
        return obj

    def remove(call, obj, recursive):
        t = tree(call)
        if not obj or is_err(obj) or obj not in t.nodes:
            return None
        doomed = [obj]
        if recursive:
            prefix = t.nodes[obj]["path"] + "/"
            doomed += [o for o, n in t.nodes.items() if n["path"].startswith(prefix) and n["fs"] == t.nodes[obj]["fs"]]
        for o in doomed:
            t.nodes.pop(o, None)
            call.heap.free(o, caller=call.lr)

    # debugfs: (name, parent, ...) ; files (name, mode, parent, data, fops)
    @m("debugfs_create_dir", subsystem="fs")
    def debugfs_dir(call):
        return create(call, "debugfs", call.arg(0), call.arg(1), "dir")

    @m("debugfs_create_file", "debugfs_create_file_unsafe", "debugfs_create_file_size", subsystem="fs")
    def debugfs_file(call):
        return create(call, "debugfs", call.arg(0), call.arg(2), "file")

    @m("debugfs_create_u8", "debugfs_create_u16", "debugfs_create_u32", "debugfs_create_u64", "debugfs_create_x8",
       "debugfs_create_x16", "debugfs_create_x32", "debugfs_create_x64", "debugfs_create_bool", "debugfs_create_size_t",
       "debugfs_create_atomic_t", "debugfs_create_ulong", "debugfs_create_blob", "debugfs_create_regset32",
       "debugfs_create_u32_array", "debugfs_create_devm_seqfile", "debugfs_create_str", subsystem="fs")
    def debugfs_value(call):
        r = create(call, "debugfs", call.arg(0), call.arg(2), "file")
        return r if call.name in ("debugfs_create_blob",) else None

    @m("debugfs_create_symlink", subsystem="fs")
    def debugfs_symlink(call):
        return create(call, "debugfs", call.arg(0), call.arg(1), "symlink")

    @m("debugfs_remove", subsystem="fs")
    def debugfs_remove(call):
        remove(call, call.arg(0), True)

    @m("debugfs_lookup", subsystem="fs")
    def debugfs_lookup(call):
        t = tree(call)
        path = t.path(call.arg(1), call.text(call.arg(0)))
        return next((o for o, n in t.nodes.items() if n["fs"] == "debugfs" and n["path"] == path), 0)

    # procfs: proc_mkdir(name, parent), proc_create(name, mode, parent, proc_ops), ...
    @m("proc_mkdir", subsystem="fs")
    def proc_mkdir(call):
        return create(call, "proc", call.arg(0), call.arg(1), "dir")

    @m("proc_mkdir_data", "proc_mkdir_mode", "_proc_mkdir", subsystem="fs")
    def proc_mkdir_mode(call):
        return create(call, "proc", call.arg(0), call.arg(2), "dir")

    @m("proc_create", "proc_create_data", "proc_create_seq_private", "proc_create_single_data",
       "proc_create_net_data", "proc_create_net_single", "proc_create_net_data_write",
       "proc_create_net_single_write", subsystem="fs")
    def proc_create(call):
        return create(call, "proc", call.arg(0), call.arg(2), "file")

    @m("proc_set_size", "proc_set_user", subsystem="fs")
    def proc_set_size(call):
        call.note = "attribute of a modelled proc entry (kept opaque)"

    @m("proc_symlink", subsystem="fs")
    def proc_symlink(call):
        return create(call, "proc", call.arg(0), call.arg(1), "symlink")

    @m("proc_remove", "proc_remove_subtree", subsystem="fs")
    def proc_remove(call):
        remove(call, call.arg(0), True)

    @m("remove_proc_entry", "remove_proc_subtree", subsystem="fs")
    def remove_proc_entry(call):
        t = tree(call)
        path = t.path(call.arg(1), call.text(call.arg(0)))
        for o, n in list(t.nodes.items()):
            if n["fs"] == "proc" and n["path"] == path:
                remove(call, o, True)
                return 0 if call.name == "remove_proc_subtree" else None
        if call.name == "remove_proc_entry":
            call.machine.log.printk(f"remove_proc_entry: removing non-empty directory or missing '{path}'", level=4)
            return None
        return (-2) & 0xFFFFFFFF

    # sysfs / kobjects
    @m("kobject_create_and_add", subsystem="fs")
    def kobject_create_and_add(call):
        r = create(call, "sysfs", call.arg(0), call.arg(1), "kobject")
        return 0 if is_err(r) else r       # the API returns NULL on failure

    @m("kset_create_and_add", subsystem="fs")
    def kset_create_and_add(call):
        r = create(call, "sysfs", call.arg(0), call.arg(2), "kset")
        return 0 if is_err(r) else r

    @m("kobject_put", "kset_unregister", "kobject_del", subsystem="fs")
    def kobject_put(call):
        remove(call, call.arg(0), True)

    @m("sysfs_create_group", "sysfs_create_groups", "sysfs_create_file_ns", "sysfs_create_files",
       "sysfs_create_bin_file", "sysfs_create_link", "sysfs_create_mount_point", "device_create_file",
       "driver_create_file", "class_create_file_ns", "sysfs_update_group", "device_add_groups", subsystem="fs")
    def sysfs_create(call):
        call.machine.record(call.name, kobj=call.arg(0))
        return 0

    @m("sysfs_remove_group", "sysfs_remove_groups", "sysfs_remove_file_ns", "sysfs_remove_files",
       "sysfs_remove_bin_file", "sysfs_remove_link", "sysfs_remove_mount_point", "device_remove_file",
       "driver_remove_file", "class_remove_file_ns", "device_remove_groups", subsystem="fs")
    def sysfs_remove(call):
        return None

    @m("kobject_uevent", "kobject_uevent_env", subsystem="fs")
    def kobject_uevent(call):
        call.note = "no userspace listens for uevents in the simulation (none delivered)"
        return 0

    # sysctl
    @m("register_sysctl", "register_sysctl_table", "register_net_sysctl", "register_sysctl_paths",
       "register_sysctl_mount_point", subsystem="fs")
    def register_sysctl(call):
        hdr = call.heap.alloc(OBJ_SIZE, zero=True, kind="ctl_table_header", caller=call.lr)
        call.machine.record(call.name, table=call.arg(1) if call.name != "register_sysctl_table" else call.arg(0),
                            addr=hdr)
        return hdr

    @m("unregister_sysctl_table", "unregister_net_sysctl_table", subsystem="fs")
    def unregister_sysctl(call):
        if call.arg(0) in call.heap.live:
            call.heap.free(call.arg(0), caller=call.lr)
