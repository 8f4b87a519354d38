#!/bin/bash
# Builds the real nodes' images from this repository's own files, nothing pulled from a
# registry, as OCI archives that `jumppod-controlplane up --real-nodes` imports into each
# node's containerd:
#   pause.oci.tar  localhost/jumppod/pause:1      the sandbox image: images/pause, static Go
#   sshd.oci.tar   localhost/jumppod/sshd:bookworm Debian bookworm (debootstrap minbase) with
#                  openssh-server, whose host keys are generated at install time and so baked
#                  into the image, as they are in the public jump-pod image
# Each archive is cached under OUTDIR, keyed by the hash of its inputs (this script, and the
# pause source); a second run with the same inputs does nothing. The Debian packages are the
# mirror's of the day the cache was made: remove OUTDIR to take newer ones. Needs root and
# debootstrap.
#
# usage: images/build.sh CONTROLPLANE_BINARY OUTDIR
#        images/build.sh --rootfs-only OUTDIR   (the sshd image's Debian root filesystem alone,
#        which needs no control plane: `make test` makes it while the control plane builds)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
controlplane=$1
out=$2
suite=bookworm
mirror=http://deb.debian.org/debian
mkdir -p "$out"

key() { cat "$@" | sha256sum | cut -c1-16; }

# sshd's root filesystem: Debian's sshd and shell. It is kept until its archive exists, so a
# run that failed while packing does not debootstrap again.
sshd_key=$(key "$here/build.sh")
sshd_tar=$out/sshd-$sshd_key.oci.tar
rootfs=$out/sshd-$sshd_key.rootfs
if [ ! -f "$sshd_tar" ] && [ ! -f "$rootfs.done" ]; then
  rm -rf "$rootfs"
  echo "images: debootstrap $suite minbase + openssh-server into $rootfs (about two minutes)"
  debootstrap --variant=minbase --include=openssh-server "$suite" "$rootfs" "$mirror" >"$rootfs.log" 2>&1 \
    || { echo "debootstrap failed; see $rootfs.log" >&2; tail -20 "$rootfs.log" >&2; exit 1; }
  # sshd refuses to start without its privilege-separation directory, which Debian's
  # init scripts create at boot; a container has no boot.
  mkdir -p "$rootfs/run/sshd"
  # What a container never uses: package caches, documentation.
  rm -rf "$rootfs"/var/cache/apt/* "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc/* \
    "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/*
  touch "$rootfs.done"
fi
if [ "$controlplane" = --rootfs-only ]; then
  echo "images: the sshd image's root filesystem is ready"
  exit 0
fi

# pause: a static binary alone in its image.
pause_key=$(key "$here/build.sh" "$here/pause/main.go")
pause_tar=$out/pause-$pause_key.oci.tar
if [ ! -f "$pause_tar" ]; then
  work=$(mktemp -d "$out/pause.XXXXXX")
  (cd "$here/.." && CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -ldflags '-s -w' -o "$work/rootfs/pause" ./images/pause)
  "$controlplane" oci-archive --rootfs "$work/rootfs" --ref localhost/jumppod/pause:1 \
    --entrypoint /pause --out "$pause_tar.tmp"
  mv "$pause_tar.tmp" "$pause_tar"
  rm -rf "$work"
fi
ln -sfn "$(basename "$pause_tar")" "$out/pause.oci.tar"

# sshd: its root filesystem packed.
if [ ! -f "$sshd_tar" ]; then
  test -f "$rootfs/etc/ssh/ssh_host_ed25519_key" || { echo "images: no host key baked into $rootfs" >&2; exit 1; }
  "$controlplane" oci-archive --rootfs "$rootfs" --ref localhost/jumppod/sshd:bookworm \
    --entrypoint /usr/sbin/sshd --entrypoint -D --out "$sshd_tar.tmp"
  mv "$sshd_tar.tmp" "$sshd_tar"
  rm -rf "$rootfs" "$rootfs.done" "$rootfs.log"
fi
ln -sfn "$(basename "$sshd_tar")" "$out/sshd.oci.tar"
# Archives of earlier inputs are never used again.
for f in "$out"/pause-*.oci.tar "$out"/sshd-*.oci.tar; do
  case $f in "$pause_tar" | "$sshd_tar") ;; *) rm -f "$f" ;; esac
done
echo "images: $out/pause.oci.tar $out/sshd.oci.tar"
