#!/bin/busybox sh
# /init of the QEMU oracle's initramfs. Runs the plan lines START..END-1 of /plan
# ("IDX PATH..." with the dependencies first, the module last), one module at a time:
# insmod each path with modh (raw finit_module result), stop at the first that fails (modprobe
# would), print the kernel's new log lines after each step (dmesg -c), then remove every module
# that appeared in /proc/modules during the step (newest first, again while that frees more:
# what the module or the kernel's request_module loaded too), so the next module starts from the
# state the boot left. The whole tree and depmod's index are in /lib/modules and /sbin/modprobe
# is busybox's, so request_module() works as on an installed system.
# Every line for the host starts with @@; the host (run.py) parses the serial console.
/bin/busybox mkdir -p /proc /sys /dev /tmp
/bin/busybox --install -s /bin
export PATH=/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
start=0; end=1000000
for w in $(cat /proc/cmdline); do
  case $w in oracle.start=*) start=${w#*=};; oracle.end=*) end=${w#*=};; esac
done
M=/lib/modules/$(uname -r)/kernel
kmsg() { dmesg -c -r | sed 's/^/@@K /'; }
# Wait (up to 10 s) while module $1 is still in its init (loaded by a request_module()).
settle() {
  i=0
  while [ $i -lt 100 ] && [ "$(cat /sys/module/$1/initstate 2>/dev/null)" = coming ]; do
    sleep 0.1; i=$((i + 1))
  done
}
mods() { cut -d' ' -f1 /proc/modules; }
dmesg -c >/dev/null
echo "@@READY $start $end $(uname -r)"
while read -r idx rest <&3; do
  [ "$idx" -lt "$start" ] && continue
  [ "$idx" -ge "$end" ] && break
  before=" $(mods | tr '\n' ' ') "
  echo "@@BEGIN $idx"
  for p in $rest; do
    n=${p##*/}; n=${n%%.ko*}; n=$(echo "$n" | tr - _)     # foo-bar.ko[.xz] -> foo_bar
    [ -d "/sys/module/$n" ] && settle "$n"
    if [ "$(cat /sys/module/$n/initstate 2>/dev/null)" = live ]; then echo "@@HAVE $p"; continue; fi
    echo "@@TRY $p"
    modh ins "$M/$p"; st=$?
    if [ $st = 17 ]; then
      # EEXIST: a request_module() loaded it meanwhile (a dependency's init asked for it, e.g.
      # 6lowpan's request_module_nowait("nhc_ipv6")). Live means that init returned 0.
      settle "$n"
      [ "$(cat /sys/module/$n/initstate 2>/dev/null)" = live ] && { echo "@@LIVE $p"; st=0; }
    fi
    kmsg
    [ $st = 0 ] || { echo "@@STOP $st"; break; }
  done
  pass=0
  while [ $pass -lt 4 ]; do
    pass=$((pass + 1)); gone=0
    for n in $(mods); do
      case "$before" in *" $n "*) continue;; esac
      echo "@@RMTRY $n"
      modh rm "$n" && gone=1
      kmsg
    done
    [ $gone = 1 ] || break
  done
  left=""
  for n in $(mods); do case "$before" in *" $n "*) ;; *) left="$left $n";; esac; done
  [ -n "$left" ] && echo "@@LEFT$left"
  echo "@@END $idx"
done 3</plan
echo "@@ALLDONE"
poweroff -f
