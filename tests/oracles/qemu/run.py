"""The real-kernel oracle: insmod each module of a list in the Debian kernel booted under QEMU.

    python3 tests/oracles/qemu/run.py --release RELEASE --kernel VMLINUZ --tree MODULES_DIR \
        --busybox BUSYBOX --modh MODH --depmod-dir DIR --list modules.txt --out results.json [--work DIR]

Any Debian armhf kernel: RELEASE (uname -r: 6.1.0-50-armmp, 6.1.0-50-armmp-lpae, 6.12.107+deb12-armmp)
names /lib/modules/RELEASE in the initramfs, and the boot must report it. A compressed module
(.ko.xz, .ko.zst, .ko.gz: 6.12's tree) is inserted as it is shipped: modh asks the kernel to
decompress it (finit_module MODULE_INIT_COMPRESSED_FILE).

Independent of armload by design (an oracle never shares code with what it checks): stdlib only,
dependencies from kmod's depmod, the kernel's own finit_module in a real boot of the same image.

One boot runs a batch of modules (--batch, default 100); inside it each module is inserted after
its dependencies (modules.dep, loaded the way modprobe does: last listed first) and everything
the step loaded is removed again (delete_module, newest first) before the next module, so module
state leaks only through what cannot be removed. After an oops, a panic, a soft lockup or a hang
(no @@END within the module's time limit) QEMU is killed and a fresh boot goes on with the next
module. The host reads the serial console line by line (see init.sh for the @@ protocol).
"""
from __future__ import annotations

import argparse
import errno as errno_mod
import hashlib
import json
import os
import re
import select
import signal
import statistics
import subprocess
import sys
import time

QEMU = ["qemu-system-arm", "-M", "virt", "-cpu", "cortex-a15", "-smp", "1", "-m", "1024",
        "-nographic", "-no-reboot", "-nic", "none"]
CMDLINE = "console=ttyAMA0 panic=-1 loglevel=8 log_buf_len=4M"
BOOT_TIMEOUT = 300.0          # seconds from spawn to @@READY
MODULE_TIMEOUT = 120.0        # seconds from @@BEGIN to @@END: past it the module hung
RMMOD_TIMEOUT = 30.0          # seconds for one delete_module (the removals after init)
SLOW = {"test_bpf": 1800.0, "test_user_copy": 1800.0, "tcrypt": 600.0}   # self-tests that run long under TCG (by module name)
SUFFIXES = (".ko", ".ko.xz", ".ko.zst", ".ko.gz")    # kmod's module file names (libkmod-file.c)
LINES_HEAD, LINES_TAIL, LINE_MAX = 30, 10, 200

# arch/arm/kernel/traps.c die(): "Internal error: %s: %x [#%d]" starts every oops on ARM.
OOPS = re.compile(r"Internal error: |kernel BUG at ")
PANIC = re.compile(r"Kernel panic - not syncing")
LOCKUP = re.compile(r"soft lockup|hard LOCKUP|rcu_sched self-detected stall|rcu: INFO: rcu_sched")
WARN = re.compile(r"WARNING: CPU: \d+ PID: ")
SUMMARY = re.compile(r"Summary:|tests? passed|tests? failed|interface ready|[Ss]elf-?tests?|"
                     r"testing speed|alg: ", re.I)
CONSOLE_TAIL = re.compile(r"\[\s*\d+\.\d+\].*$")
KLINE = re.compile(r"^<(\d+)>\s*(?:\[\s*[\d.]+\]\s?)?(.*)$")


def modname(path: str) -> str:
    """drivers/net/foo-bar.ko.xz -> foo_bar (the name in /proc/modules)."""
    base = os.path.basename(path)
    for suf in SUFFIXES[::-1]:
        if base.endswith(suf):
            base = base[:-len(suf)]
            break
    return base.replace("-", "_")


# --------------------------------------------------------------------------------------------
# Inputs: the plan (module list + modules.dep) and the initramfs
# --------------------------------------------------------------------------------------------
def read_list(path: str) -> list[str]:
    with open(path) as f:
        return [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]


def read_modules_dep(path: str) -> dict[str, list[str]]:
    """modules.dep (depmod): 'kernel/a.ko: kernel/b.ko kernel/c.ko' -> {'a.ko': ['c.ko', 'b.ko']}:
    modprobe inserts the listed dependencies last one first, so the result is in load order."""
    out = {}
    with open(path) as f:
        for ln in f:
            mod, _, deps = ln.partition(":")
            strip = lambda p: p[len("kernel/"):] if p.startswith("kernel/") else p
            out[strip(mod.strip())] = [strip(d) for d in reversed(deps.split())]
    return out


def newc(entries) -> bytes:
    """A newc cpio archive of (name, mode, data, rdev_major, rdev_minor) entries."""
    out = bytearray()
    for ino, (name, mode, data, rmaj, rmin) in enumerate(list(entries) + [("TRAILER!!!", 0, b"", 0, 0)], 1):
        nb = name.encode() + b"\0"
        fields = [ino, mode, 0, 0, 1, 0, len(data), 0, 0, rmaj, rmin, len(nb), 0]
        out += b"070701" + "".join(f"{v:08x}" for v in fields).encode() + nb
        out += b"\0" * (-len(out) % 4) + data
        out += b"\0" * (-len(out) % 4)
    return bytes(out)


def build_initramfs(path, release, plan, tree, depmod_dir, busybox, modh, init_sh):
    """The whole module tree under /lib/modules/RELEASE/kernel with depmod's index files, so the
    kernel's request_module() finds modules through busybox modprobe (/sbin/modprobe) as on an
    installed system, plus busybox, modh, /init and /plan."""
    base = f"lib/modules/{release}"
    files = []
    for d, dirs, names in os.walk(tree):
        dirs.sort()
        files += [os.path.relpath(os.path.join(d, n), tree) for n in sorted(names) if n.endswith(SUFFIXES)]
    missing = sorted({p for line in plan for p in line} - set(files))
    if missing:
        raise SystemExit(f"qemu-oracle: not in the tree: {', '.join(missing[:5])}")
    dirs = {"bin", "sbin", "dev", "proc", "sys", "tmp", "etc"}
    for p in [f"{base}/kernel/{f}" for f in files]:
        parts = p.split("/")[:-1]
        dirs.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    ents = [(d, 0o40755, b"", 0, 0) for d in sorted(dirs)]
    ents.append(("dev/console", 0o20600, b"", 5, 1))
    ents.append(("sbin/modprobe", 0o120777, b"/bin/busybox", 0, 0))
    rd = lambda p: open(p, "rb").read()
    ents += [("init", 0o100755, rd(init_sh), 0, 0), ("bin/busybox", 0o100755, rd(busybox), 0, 0),
             ("bin/modh", 0o100755, rd(modh), 0, 0)]
    plan_txt = "".join(f"{i} {' '.join(line)}\n" for i, line in enumerate(plan))
    ents.append(("plan", 0o100644, plan_txt.encode(), 0, 0))
    for n in sorted(os.listdir(depmod_dir)):
        if n.startswith("modules.") and os.path.isfile(os.path.join(depmod_dir, n)):
            ents.append((f"{base}/{n}", 0o100644, rd(os.path.join(depmod_dir, n)), 0, 0))
    ents += [(f"{base}/kernel/{f}", 0o100644, rd(os.path.join(tree, f)), 0, 0) for f in files]
    data = newc(ents)
    with open(path, "wb") as f:
        f.write(data)
    return len(data), len(files)


# --------------------------------------------------------------------------------------------
# One boot: spawn QEMU, read the console, turn @@ lines into records
# --------------------------------------------------------------------------------------------
class Boot:
    def __init__(self, argv, log_path):
        self.log = open(log_path, "w", errors="replace")
        self.p = subprocess.Popen(["nice", "-n", "10"] + argv, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        os.set_blocking(self.p.stdout.fileno(), False)
        self.buf = b""
        self.eof = False

    def lines(self, deadline):
        """Yield console lines until the deadline (then yield None once) or EOF (then stop)."""
        while True:
            while b"\n" in self.buf:
                ln, self.buf = self.buf.split(b"\n", 1)
                s = ln.decode("utf-8", "replace").rstrip("\r")
                self.log.write(s + "\n")
                yield s
            if self.eof:
                if self.buf:
                    s, self.buf = self.buf.decode("utf-8", "replace"), b""
                    yield s
                return
            left = deadline() - time.monotonic()
            if left <= 0:
                yield None
                continue
            r, _, _ = select.select([self.p.stdout], [], [], min(left, 1.0))
            if r:
                chunk = self.p.stdout.read(65536)
                if not chunk:
                    self.eof = True
                else:
                    self.buf += chunk

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()          # our own QEMU, by its pid
        self.p.wait()
        self.log.close()


def errno_name(n: int | None):
    return errno_mod.errorcode.get(n, f"E{n}") if n else None


def parse_kline(s: str):
    m = KLINE.match(s)
    return (int(m.group(1)), m.group(2)) if m else (None, s)


def new_attempt(path):
    return {"module": path, "ret": None, "errno": None, "killed": False, "lines": [], "console": []}


def finish_record(idx, plan, attempts, rm, status, seconds, boot_no):
    """The JSON record of plan line idx from its attempts (dependencies first, the module last)."""
    target = plan[idx][-1]
    deps = plan[idx][:-1]
    rec = {"module": target, "name": modname(target), "deps": deps,
           "dep_results": [], "ret": None, "errno": None, "verdict": None, "oops": False,
           "panic": False, "hang": status == "hang", "lockup": False, "warn": False,
           "lines": [], "lines_total": 0, "summary": [], "rmmod": None, "boot": boot_no}
    all_text = []
    for a in attempts:
        texts = [t for _, t in a["lines"]] or a["console"]
        all_text += texts
        if a["module"] != target:
            rec["dep_results"].append({"module": a["module"], "ret": a["ret"], "errno": errno_name(a["errno"]),
                                       "killed": a["killed"], "oops": any(OOPS.search(t) for t in texts),
                                       "already": bool(a.get("already")), "autoloaded": "autoloaded" in a})
    rec["oops"] = any(OOPS.search(t) for t in all_text)
    rec["panic"] = status == "panic" or any(PANIC.search(t) for t in all_text)
    rec["lockup"] = any(LOCKUP.search(t) for t in all_text)
    rec["warn"] = any(WARN.search(t) for t in all_text)
    mine = [a for a in attempts if a["module"] == target]
    if mine:
        a = mine[0]
        rec["ret"] = a["ret"]
        rec["errno"] = errno_name(a["errno"])
        if "autoloaded" in a:     # our insmod's own result (-EEXIST): a request_module() won the race
            rec["autoloaded"] = {"insmod_ret": a["autoloaded"]}
        elif a.get("already"):    # live before our insmod: a dependency's request_module() or a leak
            rec["autoloaded"] = {"insmod_ret": None}
        texts = [f"<{lv}>{t}" if lv is not None else t for lv, t in a["lines"]] or a["console"]
        rec["lines_total"] = len(texts)
        cut = lambda t: t if len(t) <= LINE_MAX else t[:LINE_MAX] + "..."
        if len(texts) > LINES_HEAD + LINES_TAIL:
            texts = texts[:LINES_HEAD] + [f"... {len(texts) - LINES_HEAD - LINES_TAIL} lines ..."] + texts[-LINES_TAIL:]
        rec["lines"] = [cut(t) for t in texts]
        full = [t for _, t in a["lines"]] or a["console"]
        summ = [cut(t) for t in full if SUMMARY.search(t)]
        rec["summary"] = summ if len(summ) <= 20 else summ[:10] + [f"... {len(summ) - 20} lines ..."] + summ[-10:]
    rec["rmmod"] = rm
    if status in ("hang", "panic") and not (mine and mine[0]["ret"] is not None):
        rec["verdict"] = status
    elif status in ("hang", "panic"):   # init returned; the removal afterwards hung or panicked
        rec["hang"] = False
        rec["rmmod_" + status] = True
        rec["verdict"] = "ok" if rec["ret"] == 0 else "error"
    elif not mine:
        rec["verdict"] = "dependency-failed"
    elif rec["oops"] or mine[0]["killed"]:
        rec["verdict"] = "oops"
    elif rec["ret"] == 0:
        rec["verdict"] = "ok"
    else:
        rec["verdict"] = "error"
    if rec["verdict"] in ("hang", "panic"):
        rec["ret"] = None
    return rec, seconds


def compact(rec: dict) -> dict:
    """The committed form of a record: of the dependencies only the one that failed (and those
    already loaded), of the removals only the module's own result."""
    out = dict(rec)
    deps = out.pop("dep_results")
    bad = next((d for d in deps if d["ret"] != 0 or d["killed"]), None)
    out["dep_failed"] = None if bad is None else {k: bad[k] for k in ("module", "ret", "errno", "oops", "killed")}
    out["deps_present"] = [d["module"] for d in deps if d.get("already")]
    out["deps_autoloaded"] = [d["module"] for d in deps if d.get("autoloaded")]
    out["rmmod"] = None if rec["rmmod"] is None else rec["rmmod"]["ret"]
    return out


def run_boot(argv_base, release, plan, start, end, work, boot_no, info):
    """Run plan[start:end] in one boot. Returns (records, next index, boot seconds or None)."""
    append = f"{CMDLINE} oracle.start={start} oracle.end={end}"
    argv = argv_base + ["-append", append]
    info.setdefault("qemu_argv", argv_base + ["-append", CMDLINE + " oracle.start=N oracle.end=M"])
    b = Boot(argv, os.path.join(work, f"console-{boot_no:03d}.log"))
    t0 = time.monotonic()
    state = {"deadline": t0 + BOOT_TIMEOUT}
    records, boot_s = [], None
    idx, attempts, cur, rm, t_mod, stop = None, [], None, None, None, None
    rmcur, next_idx, left = None, start, []
    try:
        for s in b.lines(lambda: state["deadline"]):
            if s is None:               # timed out
                if boot_s is None:
                    raise RuntimeError(f"boot {boot_no}: no @@READY within {BOOT_TIMEOUT:.0f} s "
                                       f"(see {b.log.name})")
                if idx is None:             # stuck between modules: go on after the last one
                    return records, next_idx, boot_s
                records.append(finish_record(idx, plan, attempts, rm, "hang", time.monotonic() - t_mod, boot_no))
                return records, idx + 1, boot_s
            if boot_s is None:
                if "Linux version " in s:
                    info.setdefault("version", s[s.index("Linux version "):].strip())
                elif "Kernel command line:" in s:
                    info.setdefault("cmdline", re.sub(r"oracle\.start=\d+ oracle\.end=\d+", "oracle.start=N oracle.end=M",
                                                      s.split("Kernel command line:", 1)[1].strip()))
            m = re.search(r"@@(READY|BEGIN|TRY|INS|K|STOP|RMTRY|RM|HAVE|LIVE|LEFT|END|ALLDONE)\b ?(.*)", s)
            if not m:
                if cur is not None:
                    cur["console"].append(s)
                elif idx is not None and attempts:
                    attempts[-1]["console"].append(s)
                if idx is not None and (PANIC.search(s) or OOPS.search(s)):
                    state["deadline"] = min(state["deadline"], time.monotonic() + 20)
                continue
            tag, rest = m.group(1), m.group(2)
            if tag != "K":      # the console's own printk can land mid-line (kept by dmesg: the @@K lines)
                rest = CONSOLE_TAIL.sub("", rest)
            if tag == "READY":
                boot_s = time.monotonic() - t0
                info["uname_r"] = rest.split()[-1] if rest.split() else None
                if info["uname_r"] != release:     # another image than the tree's: /lib/modules would not match
                    raise RuntimeError(f"boot {boot_no}: the kernel says uname -r {info['uname_r']}, "
                                       f"not {release} (see {b.log.name})")
            elif tag == "LIVE":             # loaded meanwhile by request_module(): its init returned 0
                if cur is not None:
                    cur["autoloaded"] = cur["ret"]
                    cur["ret"], cur["errno"] = 0, None
            elif tag == "LEFT":
                left = rest.split()
            elif tag == "BEGIN":
                idx, attempts, cur, rm, rmcur, left = int(rest), [], None, None, None, []
                t_mod = time.monotonic()
                state["deadline"] = t_mod + SLOW.get(modname(plan[idx][-1]), MODULE_TIMEOUT)
            elif tag == "TRY":
                cur = new_attempt(rest.strip())
                attempts.append(cur)
            elif tag == "INS":
                f = rest.split()
                ret, e = int(f[0]), int(f[1])
                cur["ret"], cur["errno"] = (0 if ret == 0 else -e), (e or None)
            elif tag == "K":
                lv, t = parse_kline(rest)
                if rmcur is not None:
                    rmcur.setdefault("lines", []).append(t)
                elif attempts:
                    attempts[-1]["lines"].append((lv, t))
            elif tag == "STOP":
                if cur is not None and cur["ret"] is None:
                    cur["killed"] = True   # modh died without a result: the kernel killed insmod
                cur = None
            elif tag == "HAVE":
                attempts.append(dict(new_attempt(rest.strip()), ret=0, already=True))
            elif tag == "RMTRY":
                cur = None
                rmcur = {"name": rest.strip()}
                state["deadline"] = time.monotonic() + RMMOD_TIMEOUT
            elif tag == "RM":
                f = rest.split()
                rmcur["ret"] = 0 if int(f[0]) == 0 else -int(f[1])
                rmcur["errno"] = errno_name(int(f[1]))
                if rm is None:
                    rm = {}
                rm[rmcur["name"]] = {k: v for k, v in rmcur.items() if k != "name"}
            elif tag == "END":
                cur = None
                target_name = modname(plan[idx][-1])
                rm_target = (rm or {}).get(target_name)
                rec = finish_record(idx, plan, attempts, rm_target, "done", time.monotonic() - t_mod, boot_no)
                rm_text = [t for r in (rm or {}).values() for t in r.get("lines", [])]
                rec[0]["rmmod_oops"] = any(OOPS.search(t) or PANIC.search(t) for t in rm_text)
                ours = {modname(p) for p in plan[idx]}
                rec[0]["also_loaded"] = sorted(set(rm or {}) - ours)     # by request_module()
                rec[0]["left_loaded"] = left                               # could not be removed
                records.append(rec)
                nxt = next_idx = idx + 1
                if rec[0]["oops"] or rec[0]["panic"] or rec[0]["lockup"] or rec[0]["rmmod_oops"]:
                    return records, nxt, boot_s     # a fresh kernel for the next module
                idx = None
                state["deadline"] = time.monotonic() + BOOT_TIMEOUT
            elif tag == "ALLDONE":
                return records, end, boot_s
        # EOF: QEMU exited (panic=-1 and -no-reboot: a panic ends it)
        if boot_s is None:
            raise RuntimeError(f"boot {boot_no}: QEMU exited before @@READY (see {b.log.name})")
        if idx is not None:
            records.append(finish_record(idx, plan, attempts, rm, "panic", time.monotonic() - t_mod, boot_no))
            return records, idx + 1, boot_s
        return records, end, boot_s
    finally:
        b.kill()


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--release", required=True, help="the kernel's uname -r, e.g. 6.12.107+deb12-armmp")
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--tree", required=True, help="the modules' kernel/ folder")
    ap.add_argument("--busybox", required=True)
    ap.add_argument("--modh", required=True)
    ap.add_argument("--depmod-dir", required=True, help="lib/modules/RELEASE with depmod's modules.dep")
    ap.add_argument("--list", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="build/qemu-oracle")
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--limit", type=int, default=None, help="only the first N modules of the list")
    a = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))    # unwind: Boot.kill() ends our QEMU
    os.makedirs(a.work, exist_ok=True)
    mods = read_list(a.list)[:a.limit]
    dep = read_modules_dep(os.path.join(a.depmod_dir, "modules.dep"))
    missing = [m for m in mods if m not in dep]
    if missing:
        sys.exit(f"qemu-oracle: not in modules.dep: {', '.join(missing[:5])}")
    plan = [dep[m] + [m] for m in mods]
    initrd = os.path.join(a.work, "initramfs.cpio")
    size, nfiles = build_initramfs(initrd, a.release, plan, a.tree, a.depmod_dir, a.busybox, a.modh,
                                   os.path.join(os.path.dirname(__file__), "init.sh"))
    print(f"qemu-oracle: {len(plan)} modules to insert; initramfs {size / 1e6:.1f} MB with the "
          f"tree's {nfiles} modules", flush=True)
    argv_base = QEMU + ["-kernel", a.kernel, "-initrd", initrd]
    qv = subprocess.run(["qemu-system-arm", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    info = {}
    progress = os.path.join(a.work, "progress.jsonl")
    done = {}
    if os.path.exists(progress):         # resume an interrupted run (same list)
        with open(progress) as f:
            for ln in f:
                r = json.loads(ln)
                if r.get("type") == "info":
                    info.update(r["info"])
                elif r.get("type") == "record" and r["record"]["module"] in mods:
                    done[r["index"]] = r
    boots, seconds = [], []
    i, boot_no = 0, 0
    with open(progress, "a") as pf:
        while i < len(plan):
            if i in done:
                i += 1
                continue
            end = min(i + a.batch, len(plan))
            while end > i + 1 and any(j in done for j in range(i, end)):
                end -= 1
            boot_no = max([boot_no] + [r["record"]["boot"] + 1 for r in done.values()])
            recs, nxt, boot_s = run_boot(argv_base, a.release, plan, i, end, a.work, boot_no, info)
            boots.append(boot_s)
            pf.write(json.dumps({"type": "info", "info": info, "boot_s": boot_s}) + "\n")
            for rec, secs in recs:
                j = plan.index(rec["deps"] + [rec["module"]])
                done[j] = {"type": "record", "index": j, "record": rec, "seconds": secs}
                pf.write(json.dumps(done[j]) + "\n")
                print(f"  [{j + 1}/{len(plan)}] {rec['module']}: {rec['verdict']} ret={rec['ret']} "
                      f"{rec['errno'] or ''} ({secs:.2f} s)", flush=True)
            pf.flush()
            if nxt <= i:
                raise RuntimeError(f"no progress at module {i}")
            i = nxt
            boot_no += 1
    records = [compact(done[j]["record"]) for j in sorted(done)]
    secs = [done[j]["seconds"] for j in sorted(done) if done[j]["record"]["verdict"] in ("ok", "error")]
    with open(progress) as f:
        boot_times = [json.loads(ln)["boot_s"] for ln in f if '"type": "info"' in ln]
    verdicts = {}
    for r in records:
        verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
    out = {
        "oracle": "Debian kernel under QEMU, insmod (finit_module) from a busybox initramfs; tests/oracles/qemu",
        "kernel": {"image": os.path.basename(a.kernel), "sha256": sha256(a.kernel), "release": info.get("uname_r"),
                   "version": info.get("version"), "cmdline": info.get("cmdline")},
        "qemu": {"version": qv, "argv": [os.path.basename(x) if x in (a.kernel, initrd) else x
                                          for x in info.get("qemu_argv", [])]},
        "policy": (f"batches of up to {a.batch} modules per boot; dependencies first (modules.dep, modprobe "
                   "order), stop at the first failing one; after each module everything it loaded is removed "
                   "(newest first); a fresh boot after an oops, panic, soft lockup or hang (no result within "
                   f"{MODULE_TIMEOUT:.0f} s, longer for {', '.join(SLOW)}; {RMMOD_TIMEOUT:.0f} s for each removal)"),
        "list": os.path.basename(a.list),
        "verdicts": dict(sorted(verdicts.items())),
        "timing": {"boots": len(boot_times), "boot_seconds_median": round(statistics.median(boot_times), 1),
                   "boot_seconds_max": round(max(boot_times), 1),
                   "module_seconds_median": round(statistics.median(secs), 3) if secs else None,
                   "module_seconds_total": round(sum(done[j]["seconds"] for j in done), 1)},
        "modules": records,
    }
    with open(a.out, "w") as f:          # one line per module: small diffs between runs
        head = json.dumps({k: v for k, v in out.items() if k != "modules"}, indent=1)
        f.write(head[:-2] + ',\n "modules": [\n')
        f.write(",\n".join(json.dumps(r, separators=(",", ":")) for r in records))
        f.write("\n ]\n}\n")
    print(f"qemu-oracle: {len(records)} modules: {out['verdicts']}; wrote {a.out}")


if __name__ == "__main__":
    try:
        main()
    except RuntimeError as e:            # a boot that never got ready, or no progress: one line, not a traceback
        sys.exit(f"qemu-oracle: {e}")
