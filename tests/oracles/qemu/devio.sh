#!/bin/busybox sh
# /init of the QEMU oracle's device-I/O boot (devio.py): the filesystems armload mounts (devtmpfs
# on /dev, proc, sysfs, debugfs), the module inserted with modh, then /plan line by line: a file
# segment (from `open` to its `close`, or the plan's end) runs in one devh process (one fd across
# the lines); a cat or echo line outside a segment runs in devh and then in busybox (cat PATH,
# `echo VALUE > PATH`), whose output, exit status and message are printed as @@BB lines.
/bin/busybox mkdir -p /proc /sys /tmp
/bin/busybox --install -s /bin
export PATH=/bin:/sbin
mount -t devtmpfs devtmpfs /dev
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t debugfs debugfs /sys/kernel/debug
dmesg -c >/dev/null
echo "@@READY $(uname -r)"
modh ins /module.ko
dmesg -c -r | sed 's/^/@@K /'
seg() {
  [ -s /tmp/seg ] && devh /tmp/seg "$first"
  : > /tmp/seg
}
: > /tmp/seg
idx=0; inseg=0; first=0
while read -r op a b; do
  if [ $inseg = 1 ] || [ "$op" = open ]; then
    [ $inseg = 0 ] && first=$idx
    inseg=1
    echo "$op $a $b" >> /tmp/seg
    if [ "$op" = close ]; then seg; inseg=0; fi
  else
    echo "$op $a $b" > /tmp/one
    devh /tmp/one $idx
    if [ "$op" = cat ]; then
      cat "$a" > /tmp/o 2>/tmp/e; rc=$?
      echo "@@BB $idx cat $rc $(od -An -tx1 -v /tmp/o | tr -d ' \n') $(cat /tmp/e)"
    elif [ "$op" = echo ]; then
      ( echo "$a" > "$b" ) 2>/tmp/e; rc=$?
      echo "@@BB $idx echo $rc - $(cat /tmp/e)"
    fi
  fi
  idx=$((idx + 1))
done < /plan
[ $inseg = 1 ] && seg
dmesg -c -r | sed 's/^/@@K /'
modh rm "$(cat /modname)"
echo "@@END"
poweroff -f
