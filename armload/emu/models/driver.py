"""drivers/base and char/block registration: the driver core's registries with the kernel's rules.

Registrations keep state: dynamic majors and misc minors are handed out as the kernel does,
duplicates get -EBUSY/-EEXIST, a platform driver is matched by name with platform devices and
its probe runs, __platform_driver_probe without a device gets -ENODEV.
"""
from __future__ import annotations

from ..errno import EBUSY, EEXIST, EINVAL, ENODEV, ENOMEM, err_ptr, is_err
from .base import ModelLibrary

MISC_DYNAMIC_MINOR = 255
DYNAMIC_MINORS = 128              # drivers/char/misc.c (6.1)
CHRDEV_MAJOR_DYN_END, CHRDEV_MAJOR_MAX = 234, 512
CHRDEV_MAJOR_DYN_EXT_START, CHRDEV_MAJOR_DYN_EXT_END = 511, 384
MINORBITS = 20
# struct platform_driver (Debian 6.1, with the backported remove_new):
# { probe; remove; remove_new; shutdown; suspend; resume; struct device_driver driver; id_table; ... }
PDRV_PROBE, PDRV_REMOVE, PDRV_REMOVE_NEW, PDRV_DRIVER = 0, 4, 8, 24
PDRV_ID_TABLE = PDRV_DRIVER + 76  # sizeof(struct device_driver) on this config (sizeof platform_driver: 108)
PDEV_NAME, PDEV_ID, PDEV_DEV = 0, 4, 16       # struct device is 8-aligned (u64 members)
DEVICE_SIZE = 0x200               # covers struct device (6.1 armmp: 0x1a0 bytes)
DEV_PLATFORM_DATA = 60            # offsetof(struct device, platform_data): dev_get_platdata() in Debian's modules
PDEV_SIZE = PDEV_DEV + DEVICE_SIZE + 0x40
CLASS_SIZE = 0x80


class Registry:
    def __init__(self):
        self.misc_minors: set[int] = set()
        self.misc: dict[int, dict] = {}
        self.chrdev: list[tuple[int, int, int, str]] = []     # (major, baseminor, count, name)
        self.blkdev: dict[int, str] = {}
        self.classes: dict[str, int] = {}
        self.devices: dict[int, dict] = {}                    # struct device -> info
        self.pdrivers: dict[int, dict] = {}
        self.pdevices: dict[int, dict] = {}


def reg(call) -> Registry:
    return call.state("driver", Registry)


def _name(call, ptr: int) -> str | None:
    return call.text(ptr, 128) if ptr else None


def register(lib: ModelLibrary) -> None:
    m = lib.model

    # --- misc -------------------------------------------------------------------------------
    @m("misc_register", subsystem="driver")
    def misc_register(call):
        r = reg(call)
        misc = call.arg(0)
        minor, name = call.u32(misc), _name(call, call.u32(misc + 4))
        if minor == MISC_DYNAMIC_MINOR:
            free = [i for i in range(DYNAMIC_MINORS) if DYNAMIC_MINORS - i - 1 not in r.misc_minors]
            if not free:
                return err_ptr(EBUSY)
            minor = DYNAMIC_MINORS - free[0] - 1
            call.put_u32(misc, minor)
        elif minor in r.misc_minors:
            return err_ptr(EBUSY)
        r.misc_minors.add(minor)
        dev = call.heap.alloc(DEVICE_SIZE, zero=True, kind=f"struct device misc/{name}", caller=call.lr)
        call.put_u32(misc + 24, dev)                       # misc->this_device
        r.misc[misc] = {"minor": minor, "name": name}
        call.machine.record("misc_register", name=name, minor=minor, fops=call.u32(misc + 8), addr=misc)
        return 0

    @m("misc_deregister", subsystem="driver")
    def misc_deregister(call):
        r = reg(call)
        info = r.misc.pop(call.arg(0), None)
        if info is None:
            call.fault("misc_deregister of a device that is not registered (list_del corruption)", "bug")
        r.misc_minors.discard(info["minor"])
        dev = call.u32(call.arg(0) + 24)
        if dev in call.heap.live:
            call.heap.free(dev, caller=call.lr)              # device_destroy(misc_class, ...)

    # --- char devices -----------------------------------------------------------------------
    def overlaps(r, major, base, count):
        return any(mj == major and base < b + c and b < base + count for mj, b, c, _ in r.chrdev)

    def dynamic_major(r):
        for i in range(254, CHRDEV_MAJOR_DYN_END - 1, -1):
            if not any(mj == i for mj, *_ in r.chrdev):
                return i
        for i in range(CHRDEV_MAJOR_DYN_EXT_START, CHRDEV_MAJOR_DYN_EXT_END - 1, -1):
            if not any(mj == i for mj, *_ in r.chrdev):
                return i
        return None

    def chrdev_region(call, major, base, count, name):
        r = reg(call)
        if major >= CHRDEV_MAJOR_MAX:
            return -EINVAL
        if major == 0:
            major = dynamic_major(r)
            if major is None:
                return -EBUSY
        if overlaps(r, major, base, count):
            return -EBUSY
        r.chrdev.append((major, base, count, name))
        call.machine.record("chrdev_region", name=name, major=major, minor=base, count=count)
        return major

    @m("__register_chrdev", subsystem="driver")
    def register_chrdev(call):
        major = chrdev_region(call, call.arg(0), call.arg(1), call.arg(2), _name(call, call.arg(3)))
        if major < 0:
            return major & 0xFFFFFFFF
        return major if call.arg(0) == 0 else 0

    @m("alloc_chrdev_region", subsystem="driver")
    def alloc_chrdev_region(call):
        major = chrdev_region(call, 0, call.arg(1), call.arg(2), _name(call, call.arg(3)))
        if major < 0:
            return major & 0xFFFFFFFF
        call.put_u32(call.arg(0), (major << MINORBITS) | call.arg(1))
        return 0

    @m("register_chrdev_region", subsystem="driver")
    def register_chrdev_region(call):
        dev, count = call.arg(0), call.arg(1)
        major = chrdev_region(call, dev >> MINORBITS, dev & ((1 << MINORBITS) - 1), count, _name(call, call.arg(2)))
        return 0 if major >= 0 else major & 0xFFFFFFFF

    @m("unregister_chrdev_region", "__unregister_chrdev", subsystem="driver")
    def unregister_chrdev(call):
        r = reg(call)
        if call.name == "__unregister_chrdev":
            major, base = call.arg(0), call.arg(1)
        else:
            major, base = call.arg(0) >> MINORBITS, call.arg(0) & ((1 << MINORBITS) - 1)
        r.chrdev = [e for e in r.chrdev if not (e[0] == major and e[1] == base)]

    @m("cdev_alloc", subsystem="driver")
    def cdev_alloc(call):
        return call.heap.alloc(0x40, zero=True, kind="struct cdev", caller=call.lr)

    @m("cdev_add", "cdev_device_add", subsystem="driver")
    def cdev_add(call):
        call.machine.record(call.name, addr=call.arg(0), dev=call.arg(1))
        return 0

    @m("cdev_del", "cdev_device_del", subsystem="driver")
    def cdev_del(call):
        return None

    # --- block majors -------------------------------------------------------------------------
    @m("__register_blkdev", subsystem="driver")
    def register_blkdev(call):
        r = reg(call)
        major, name = call.arg(0), _name(call, call.arg(1))
        if major == 0:
            major = next((i for i in range(254, 0, -1) if i not in r.blkdev), None)
            if major is None:
                return err_ptr(EBUSY)
            r.blkdev[major] = name
            call.machine.record("register_blkdev", name=name, major=major)
            return major
        if major >= 512:
            return err_ptr(EINVAL)
        if major in r.blkdev:
            return err_ptr(EBUSY)
        r.blkdev[major] = name
        call.machine.record("register_blkdev", name=name, major=major)
        return 0

    @m("unregister_blkdev", subsystem="driver")
    def unregister_blkdev(call):
        reg(call).blkdev.pop(call.arg(0), None)

    # --- classes and devices ------------------------------------------------------------------
    @m("__class_create", "class_create", subsystem="driver")
    def class_create(call):
        name = _name(call, call.arg(1) if call.name == "__class_create" else call.arg(0))
        r = reg(call)
        if name in r.classes:
            return err_ptr(EEXIST)
        cls = call.heap.alloc(CLASS_SIZE, zero=True, kind=f"struct class {name}", caller=call.lr)
        if not cls:
            return err_ptr(ENOMEM)
        call.put_u32(cls, call.arg(1) if call.name == "__class_create" else call.arg(0))
        r.classes[name] = cls
        call.machine.record("class_create", name=name, addr=cls)
        return cls

    @m("class_destroy", subsystem="driver")
    def class_destroy(call):
        if not call.arg(0) or is_err(call.arg(0)):
            return None
        r = reg(call)
        r.classes = {n: c for n, c in r.classes.items() if c != call.arg(0)}
        call.heap.free(call.arg(0), caller=call.lr)

    @m("device_create", subsystem="driver")
    def device_create(call):
        from .fmt import format_kernel
        cls, devt = call.arg(0), call.arg(2)
        if not cls or is_err(cls):
            return err_ptr(ENODEV)
        name = format_kernel(call, call.string(call.arg(4), 256), call.varargs(5)) if call.arg(4) else "(null)"
        r = reg(call)
        if any(d["class"] == cls and d["name"] == name for d in r.devices.values()):
            call.machine.log.printk(f"sysfs: cannot create duplicate filename '/class/.../{name}'", level=3)
            return err_ptr(EEXIST)
        dev = call.heap.alloc(DEVICE_SIZE, zero=True, kind=f"struct device {name}", caller=call.lr)
        if not dev:
            return err_ptr(ENOMEM)
        r.devices[dev] = {"class": cls, "name": name, "devt": devt, "drvdata": call.arg(3)}
        call.machine.record("device_create", name=name, devt=devt, addr=dev)
        return dev

    @m("device_destroy", subsystem="driver")
    def device_destroy(call):
        r = reg(call)
        for dev, d in list(r.devices.items()):
            if d["class"] == call.arg(0) and d["devt"] == call.arg(1):
                del r.devices[dev]
                call.heap.free(dev, caller=call.lr)
                return None

    # --- the platform bus -----------------------------------------------------------------------
    def driver_name(call, drv):
        p = call.u32(drv + PDRV_DRIVER)
        if not p:
            call.fault("Unable to handle kernel NULL pointer dereference in strcmp (driver_find): "
                       "the driver has no name", "null-deref")
        return call.text(p, 64)

    def id_names(call, drv):
        out, t = [], call.u32(drv + PDRV_ID_TABLE)
        while t and len(out) < 64:
            n = call.string(t, 20)
            if not n:
                break
            out.append((n.decode("latin-1"), t))
            t += 24                      # struct platform_device_id { char name[20]; kernel_ulong_t data; }
        return out

    def match(call, drv, pdev):
        pname = call.text(call.u32(pdev + PDEV_NAME), 64)
        names = id_names(call, drv)
        if names:
            return any(n == pname for n, _ in names)
        return driver_name(call, drv) == pname

    def probe(call, drv, pdev, probe_fn=None):
        fn = probe_fn or call.u32(drv + PDRV_PROBE)
        r = reg(call)
        if not fn:
            r.pdevices[pdev]["driver"] = drv
            return 0
        rc = call.invoke(fn, pdev)
        rc = rc - (1 << 32) if rc & 0x80000000 else rc
        call.machine.record("platform_probe", driver=driver_name(call, drv), device=r.pdevices[pdev]["name"],
                            probe=call.symbolize(fn & ~1), result=rc)
        if rc == 0:
            r.pdevices[pdev]["driver"] = drv
        return rc

    def bind_all(call, drv, probe_fn=None):
        bound = 0
        for pdev, info in reg(call).pdevices.items():
            if info.get("driver") is None and info["added"] and match(call, drv, pdev):
                if probe(call, drv, pdev, probe_fn) == 0:
                    bound += 1
        return bound

    @m("__platform_driver_register", subsystem="driver")
    def platform_driver_register(call):
        drv = call.arg(0)
        name = driver_name(call, drv)
        r = reg(call)
        if any(d["name"] == name for d in r.pdrivers.values()):
            call.machine.log.printk(f"Error: Driver '{name}' is already registered, aborting...", level=3)
            return err_ptr(EBUSY)
        r.pdrivers[drv] = {"name": name}
        call.machine.record("platform_driver_register", name=name, probe=call.u32(drv + PDRV_PROBE), addr=drv)
        bind_all(call, drv)
        return 0

    @m("__platform_driver_probe", subsystem="driver")
    def platform_driver_probe(call):
        drv, probe_fn = call.arg(0), call.arg(1)
        name = driver_name(call, drv)
        reg(call).pdrivers[drv] = {"name": name}
        call.machine.record("platform_driver_probe", name=name, probe=probe_fn, addr=drv)
        if bind_all(call, drv, probe_fn) == 0:
            del reg(call).pdrivers[drv]
            return err_ptr(ENODEV)      # "no device bound": the driver is unregistered again
        return 0

    @m("platform_driver_unregister", subsystem="driver")
    def platform_driver_unregister(call):
        r = reg(call)
        drv = call.arg(0)
        r.pdrivers.pop(drv, None)
        for pdev, info in r.pdevices.items():
            if info.get("driver") == drv:
                rm = call.u32(drv + PDRV_REMOVE) or call.u32(drv + PDRV_REMOVE_NEW)
                if rm:
                    call.invoke(rm, pdev)
                info["driver"] = None

    def new_pdev(call, name_ptr, pid):
        pdev = call.heap.alloc(PDEV_SIZE, zero=True, kind="struct platform_device", caller=call.lr)
        if not pdev:
            return 0
        name = _name(call, name_ptr) or "(null)"
        nm = call.heap.alloc(len(name) + 1, zero=True, kind="platform device name", caller=call.lr)
        call.write(nm, name.encode() + b"\0")
        call.put_u32(pdev + PDEV_NAME, nm)
        call.put_u32(pdev + PDEV_ID, pid)
        reg(call).pdevices[pdev] = {"name": name, "id": pid, "added": False, "driver": None}
        return pdev

    def add_pdev(call, pdev):
        r = reg(call)
        info = r.pdevices.get(pdev)
        if info is None:
            call.fault(f"platform_device_add of {pdev:#010x}, not allocated by platform_device_alloc", "bug")
        if any(i["added"] and i["name"] == info["name"] and i["id"] == info["id"] for i in r.pdevices.values()):
            return -EEXIST
        info["added"] = True
        call.machine.record("platform_device_add", name=info["name"], id=info["id"], addr=pdev)
        for drv in list(r.pdrivers):
            if info["driver"] is None and match(call, drv, pdev):
                probe(call, drv, pdev)
        return 0

    @m("platform_device_add_data", "platform_device_add_resources", subsystem="driver")
    def platform_device_add_data(call):
        info = reg(call).pdevices.get(call.arg(0))
        if info is None:
            call.fault(f"{call.name} on {call.arg(0):#010x}, not a platform device from platform_device_alloc", "bug")
        size = call.arg(2)
        copy = call.heap.alloc(size, kind=f"{call.name} copy", caller=call.lr) if size else 0
        if size and not copy:
            return (-12) & 0xFFFFFFFF
        if size:
            call.write(copy, call.read(call.arg(1), size))
        info["data" if call.name.endswith("data") else "resources"] = (copy, size)
        if call.name.endswith("data"):
            call.put_u32(call.arg(0) + PDEV_DEV + DEV_PLATFORM_DATA, copy)   # pdev->dev.platform_data
        return 0

    @m("platform_device_alloc", subsystem="driver")
    def platform_device_alloc(call):
        return new_pdev(call, call.arg(0), call.arg(1))

    @m("platform_device_add", subsystem="driver")
    def platform_device_add(call):
        return add_pdev(call, call.arg(0)) & 0xFFFFFFFF

    @m("platform_device_register_full", subsystem="driver")
    def platform_device_register_full(call):
        # struct platform_device_info { parent; fwnode; of_node_reused; name; id; res; num_res; ... }
        info = call.arg(0)
        pdev = new_pdev(call, call.u32(info + 12), call.u32(info + 16))
        if not pdev:
            return err_ptr(ENOMEM)
        rc = add_pdev(call, pdev)
        return pdev if rc == 0 else rc & 0xFFFFFFFF

    @m("platform_device_put", "platform_device_del", "platform_device_unregister", subsystem="driver")
    def platform_device_put(call):
        r = reg(call)
        if call.arg(0) and not is_err(call.arg(0)) and call.name != "platform_device_put":
            info = r.pdevices.get(call.arg(0))
            if info:
                info["added"] = False

    @m("platform_get_resource", "platform_get_resource_byname", subsystem="driver")
    def platform_get_resource(call):
        call.note = "no resources: the emulated board has no such device"
        return 0

    @m("platform_get_irq", "platform_get_irq_optional", "platform_get_irq_byname", subsystem="driver")
    def platform_get_irq(call):
        return (-6) & 0xFFFFFFFF          # -ENXIO: no interrupt described for this device

    @m("platform_device_register", subsystem="driver")
    def platform_device_register(call):
        pdev = call.arg(0)
        r = reg(call)
        if pdev not in r.pdevices:
            r.pdevices[pdev] = {"name": _name(call, call.u32(pdev + PDEV_NAME)) or "(null)",
                                "id": call.u32(pdev + PDEV_ID), "added": False, "driver": None}
        return add_pdev(call, pdev) & 0xFFFFFFFF


# --- other buses: a driver registers and waits for devices; the emulated board has none ---------
BUS_DRIVERS = {              # register function: (bus, index of the driver argument)
    "i2c_register_driver": ("i2c", 1), "__spi_register_driver": ("spi", 1), "usb_register_driver": ("usb", 0),
    "__pci_register_driver": ("pci", 0), "__hid_register_driver": ("hid", 0), "__serio_register_driver": ("serio", 0),
    "sdio_register_driver": ("sdio", 0), "mdio_driver_register": ("mdio", 0), "amba_driver_register": ("amba", 0),
    "__mdiobus_register": None, "usb_serial_register_drivers": ("usb-serial", 0),
    "__media_entity_setup_link": None, "hdac_driver_register": None,
    "__vio_register_driver": None, "phy_driver_register": ("mdio", 0), "phy_drivers_register": ("mdio", 0),
    "__w1_register_family": None, "w1_register_family": ("w1", 0), "__mmc_register_driver": None,
    "mmc_register_driver": ("mmc", 0), "__sdw_register_driver": ("soundwire", 0),
    "__ps3_system_bus_driver_register": None, "bcma_driver_register": None, "__bcma_driver_register": ("bcma", 0),
    "ssb_driver_register": None, "__ssb_driver_register": ("ssb", 0), "__tty_port_register": None,
    "__platform_register_drivers": None, "pcmcia_register_driver": ("pcmcia", 0), "__gameport_register_driver": ("gameport", 0),
    "virtio_register_driver": None, "__virtio_register_driver": ("virtio", 0), "register_virtio_driver": ("virtio", 0),
    "__register_virtio_driver": ("virtio", 0), "__usb_serial_register_drivers": None,
    "snd_hda_codec_driver_register": None, "__hda_codec_driver_register": ("hdaudio", 0),
    "__acpi_driver_register": None, "acpi_bus_register_driver": ("acpi", 0), "__rpmsg_register_driver": ("rpmsg", 0),
    "register_rpmsg_driver": None, "__ulpi_register_driver": ("ulpi", 0), "__ishtp_cl_driver_register": None,
    "__i3c_driver_register": None, "i3c_driver_register_with_owner": ("i3c", 0), "__typec_altmode_register_driver": ("typec", 0),
    "__greybus_register_driver": ("greybus", 0), "__tb_service_register_driver": None, "tb_register_service_driver": ("thunderbolt", 0),
    "__ntb_register_client": None, "__mcb_register_driver": ("mcb", 0), "__fsi_driver_register": None,
    "fsi_driver_register": ("fsi", 0), "__auxiliary_driver_register": ("auxiliary", 0), "__cdx_driver_register": None,
    "__ipack_driver_register": None, "ipack_driver_register": ("ipack", 0), "__siox_driver_register": ("siox", 0),
    "__slim_driver_register": None, "__slimbus_driver_register": ("slimbus", 0), "__spmi_driver_register": ("spmi", 0),
    "__hsi_register_client_driver": None, "hsi_register_client_driver": ("hsi", 0), "__nd_driver_register": ("nd", 0),
    "__mhi_driver_register": ("mhi", 0), "__ccwgroup_driver_register": None, "__zorro_register_driver": None,
    "__wmi_driver_register": None, "__apr_driver_register": ("apr", 0), "__gnss_register_driver": None,
    "__iio_trigger_register": None, "__sdio_register_driver": None, "__serdev_device_driver_register": ("serial", 0),
    "__i2c_add_driver": None,
}
BUS_UNREGISTER = ("i2c_del_driver", "spi_unregister_driver", "usb_deregister", "pci_unregister_driver",
                  "hid_unregister_driver", "serio_unregister_driver", "sdio_unregister_driver",
                  "mdio_driver_unregister", "amba_driver_unregister", "usb_serial_deregister_drivers",
                  "phy_driver_unregister", "phy_drivers_unregister", "w1_unregister_family", "mmc_unregister_driver",
                  "sdw_unregister_driver", "bcma_driver_unregister", "ssb_driver_unregister", "pcmcia_unregister_driver",
                  "gameport_unregister_driver", "unregister_virtio_driver", "hda_codec_driver_unregister",
                  "acpi_bus_unregister_driver", "unregister_rpmsg_driver", "ulpi_unregister_driver",
                  "i3c_driver_unregister", "typec_altmode_unregister_driver", "greybus_deregister_driver",
                  "tb_unregister_service_driver", "mcb_unregister_driver", "fsi_driver_unregister",
                  "auxiliary_driver_unregister", "ipack_driver_unregister", "siox_driver_unregister",
                  "slim_driver_unregister", "spmi_driver_unregister", "hsi_unregister_client_driver",
                  "nd_driver_unregister", "mhi_driver_unregister", "apr_driver_unregister",
                  "serdev_device_driver_unregister")


def register_buses(lib: ModelLibrary) -> None:
    for fname, spec in BUS_DRIVERS.items():
        if spec is None:
            continue
        bus, idx = spec

        def reg_drv(call, _bus=bus, _i=idx):
            drvs = call.state("driver.bus", dict)
            drv = call.arg(_i)
            if not drv:
                call.fault(f"{call.name}: NULL driver", "null-deref")
            if drv in drvs:
                call.machine.log.printk(f"Error: Driver is already registered on bus {_bus}, aborting...", level=3)
                return err_ptr(EBUSY)
            drvs[drv] = _bus
            call.machine.record(call.name, bus=_bus, addr=drv)
            call.note = f"registered on the {_bus} bus; the emulated board has no {_bus} devices, so no probe runs"
            return 0
        lib.set(fname, reg_drv, subsystem="driver")

    def unreg(call):
        call.state("driver.bus", dict).pop(call.arg(0), None)
    for fname in BUS_UNREGISTER:
        lib.set(fname, unreg, subsystem="driver")


# --- the driver core itself (bus cores that are modules, e.g. usbcore, call into it) ----------
DRV_NAME, DRV_BUS = 0, 4          # struct device_driver { name; bus; ... }
BUS_NAME = 0                      # struct bus_type { name; dev_name; ... }


def register_core(lib: ModelLibrary) -> None:
    m = lib.model

    def buses(call) -> dict:
        return call.state("driver.buses", dict)      # bus_type -> {"name", "drivers": {name: drv}}

    @m("bus_register", subsystem="driver")
    def bus_register(call):
        bus = call.arg(0)
        name = _name(call, call.u32(bus + BUS_NAME))
        if any(b["name"] == name for b in buses(call).values()):
            return err_ptr(EEXIST)                   # kset_register: duplicate kobject name
        buses(call)[bus] = {"name": name, "drivers": {}}
        call.machine.record("bus_register", name=name, addr=bus)
        return 0

    @m("bus_unregister", subsystem="driver")
    def bus_unregister(call):
        buses(call).pop(call.arg(0), None)

    @m("driver_register", subsystem="driver")
    def driver_register(call):
        drv = call.arg(0)
        bus = call.u32(drv + DRV_BUS)
        info = buses(call).get(bus)
        name_p = call.u32(drv + DRV_NAME)
        if not name_p:
            call.fault("Unable to handle kernel NULL pointer dereference in strcmp (driver_find): "
                       "the driver has no name", "null-deref")
        name = call.text(name_p, 64)
        if info is None:
            # a bus the kernel registered at boot: armload knows it only by name
            bname = _name(call, call.u32(bus + BUS_NAME)) if bus else None
            if not bus:
                call.fault(f"driver_register: driver '{name}' has no bus (NULL dereference of drv->bus)",
                           "null-deref")
            info = buses(call)[bus] = {"name": bname, "drivers": {}, "boot": True}
        if name in info["drivers"]:
            call.machine.log.printk(f"Error: Driver '{name}' is already registered, aborting...", level=3)
            return err_ptr(EBUSY)
        info["drivers"][name] = drv
        call.machine.record("driver_register", name=name, bus=info["name"], addr=drv)
        call.note = f"registered on bus {info['name']}; no {info['name']} devices exist in the simulation"
        return 0

    @m("driver_unregister", subsystem="driver")
    def driver_unregister(call):
        drv = call.arg(0)
        for b in buses(call).values():
            for n, d in list(b["drivers"].items()):
                if d == drv:
                    del b["drivers"][n]


def register_notifiers(lib: ModelLibrary) -> None:
    m = lib.model

    @m("bus_register_notifier", "bus_unregister_notifier", subsystem="driver")
    def bus_notifier(call):
        # the notifier head lives in the bus's private data, which only a booted driver core has
        call.machine.record(call.name, bus=call.arg(0), notifier=call.arg(1))
        call.note = "recorded; armload adds no devices to this bus, so the notifier is never called"
        return 0

    @m("__class_register", "class_register", subsystem="driver")
    def class_register(call):
        cls = call.arg(0)
        name = _name(call, call.u32(cls))
        r = reg(call)
        if name in r.classes:
            return err_ptr(EEXIST)
        r.classes[name] = cls
        call.machine.record("class_register", name=name, addr=cls)
        return 0

    @m("class_unregister", subsystem="driver")
    def class_unregister(call):
        r = reg(call)
        r.classes = {n: c for n, c in r.classes.items() if c != call.arg(0)}

    @m("device_register", "device_add", subsystem="driver")
    def device_register(call):
        call.machine.record(call.name, addr=call.arg(0))
        call.note = "recorded; no driver is matched to devices added this way"
        return 0

    @m("device_unregister", "device_del", "put_device", subsystem="driver")
    def device_unregister(call):
        return None

    @m("get_device", subsystem="driver")
    def get_device(call):
        return call.arg(0)


def register_iterators(lib: ModelLibrary) -> None:
    m = lib.model

    @m("bus_for_each_dev", subsystem="driver")
    def bus_for_each_dev(call):
        call.note = "no devices on simulated buses: fn is never called"
        return 0

    @m("bus_for_each_drv", subsystem="driver")
    def bus_for_each_drv(call):
        bus, data, fn = call.arg(0), call.arg(2), call.arg(3)
        info = call.state("driver.buses", dict).get(bus)
        for drv in list((info or {}).get("drivers", {}).values()):
            rc = call.invoke(fn, drv, data)
            if rc:
                return rc
        return 0
