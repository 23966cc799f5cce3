#!/bin/sh
# Lays out the image's root file system from a built binary: the binary, the shared
# libraries it loads (as ldd lists them), the CA certificates, and the directories it
# writes: /data (uid 1001, group 0, group-writable as OpenShift needs) and /tmp.
#
#   sh scripts/container-rootfs.sh BINARY DEST
set -eu
bin="$1"
dest="$2"
rm -rf "$dest"
mkdir -p "$dest/usr/local/bin" "$dest/etc/ssl/certs" "$dest/data" "$dest/app" "$dest/tmp"
cp "$bin" "$dest/usr/local/bin/actiongate"
if command -v strip >/dev/null 2>&1; then
  strip --strip-debug "$dest/usr/local/bin/actiongate"
fi
for lib in $(ldd "$bin" | awk '/=>/ { print $3 } /ld-linux/ { print $1 }'); do
  mkdir -p "$dest$(dirname "$lib")"
  cp -L "$lib" "$dest$lib"
done
cp -L /etc/ssl/certs/ca-certificates.crt "$dest/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\nactiongate:x:1001:0:actiongate:/data:/sbin/nologin\n' >"$dest/etc/passwd"
printf 'root:x:0:\n' >"$dest/etc/group"
chown -R 1001:0 "$dest/data" 2>/dev/null || true
chmod 0770 "$dest/data"
chmod 1777 "$dest/tmp"
