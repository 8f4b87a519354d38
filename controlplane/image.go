package main

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// ociArchiveCommand is `oci-archive`: it packs a root filesystem into an OCI
// image layout tarball of one uncompressed layer, which `ctr images import`
// loads. The real nodes' images are made this way from local files
// (images/build.sh), since nothing can be pulled from a registry here.
func ociArchiveCommand(args []string) int {
	fs := flag.NewFlagSet("oci-archive", flag.ContinueOnError)
	rootfs := fs.String("rootfs", "", "directory holding the image's root filesystem")
	ref := fs.String("ref", "", "image reference, e.g. localhost/jumppod/sshd:bookworm")
	out := fs.String("out", "", "the OCI archive to write")
	var entrypoint stringList
	fs.Var(&entrypoint, "entrypoint", "the image's entrypoint, one word per flag")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *rootfs == "" || *ref == "" || *out == "" || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: jumppod-controlplane oci-archive --rootfs DIR --ref REF --out FILE [--entrypoint WORD]...")
		return 2
	}
	if err := writeOCIArchive(*rootfs, *ref, entrypoint, *out); err != nil {
		fmt.Fprintf(os.Stderr, "jumppod-controlplane oci-archive: %v\n", err)
		return 1
	}
	return 0
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, " ") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// blob is one content-addressed file of the layout.
type blob struct {
	mediaType string
	digest    string
	size      int64
	data      []byte // nil for the layer, which is streamed from a file
	path      string
}

func (b blob) descriptor() map[string]any {
	return map[string]any{"mediaType": b.mediaType, "digest": b.digest, "size": b.size}
}

func jsonBlob(mediaType string, v any) (blob, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return blob{}, err
	}
	sum := sha256.Sum256(data)
	return blob{mediaType: mediaType, digest: "sha256:" + hex.EncodeToString(sum[:]), size: int64(len(data)), data: data}, nil
}

func writeOCIArchive(rootfs, ref string, entrypoint []string, out string) error {
	// The layer goes to a temporary file first: its digest is needed before
	// the archive that holds it can be written.
	layerFile, err := os.CreateTemp(filepath.Dir(out), ".layer-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(layerFile.Name())
	defer layerFile.Close()
	digester := sha256.New()
	counter := &countingWriter{w: io.MultiWriter(layerFile, digester)}
	if err := tarDirectory(rootfs, counter); err != nil {
		return fmt.Errorf("packing %s: %w", rootfs, err)
	}
	diffID := "sha256:" + hex.EncodeToString(digester.Sum(nil))
	layer := blob{mediaType: "application/vnd.oci.image.layer.v1.tar", digest: diffID, size: counter.n, path: layerFile.Name()}

	created := time.Unix(0, 0).UTC().Format(time.RFC3339)
	config, err := jsonBlob("application/vnd.oci.image.config.v1+json", map[string]any{
		"created":      created,
		"architecture": "amd64",
		"os":           "linux",
		"config": map[string]any{
			"Entrypoint": entrypoint,
			"Env":        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		},
		"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{diffID}},
		"history": []map[string]any{{"created": created, "created_by": "jumppod-controlplane oci-archive"}},
	})
	if err != nil {
		return err
	}
	manifest, err := jsonBlob("application/vnd.oci.image.manifest.v1+json", map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        config.descriptor(),
		"layers":        []any{layer.descriptor()},
	})
	if err != nil {
		return err
	}
	manifestDesc := manifest.descriptor()
	manifestDesc["platform"] = map[string]string{"architecture": "amd64", "os": "linux"}
	// containerd names the imported image after io.containerd.image.name;
	// other tools read the OCI ref annotation.
	manifestDesc["annotations"] = map[string]string{
		"io.containerd.image.name":          ref,
		"org.opencontainers.image.ref.name": ref[strings.LastIndex(ref, ":")+1:],
	}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{manifestDesc}})
	if err != nil {
		return err
	}

	tmp := out + ".partial"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(f)
	write := func(name string, size int64, r io.Reader) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := io.Copy(tw, r)
		return err
	}
	layout := []byte(`{"imageLayoutVersion":"1.0.0"}`)
	if err := write("oci-layout", int64(len(layout)), strings.NewReader(string(layout))); err != nil {
		return err
	}
	if err := write("index.json", int64(len(index)), strings.NewReader(string(index))); err != nil {
		return err
	}
	for _, b := range []blob{config, manifest} {
		if err := write("blobs/sha256/"+strings.TrimPrefix(b.digest, "sha256:"), b.size, strings.NewReader(string(b.data))); err != nil {
			return err
		}
	}
	if _, err := layerFile.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := write("blobs/sha256/"+strings.TrimPrefix(layer.digest, "sha256:"), layer.size, layerFile); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// tarDirectory writes dir as a layer: paths relative to it, owners, modes,
// symlinks, hard links (once, then as links) and device nodes kept.
func tarDirectory(dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	type inode struct{ dev, ino uint64 }
	seen := map[inode]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(path); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			hdr.Name += "/"
		}
		// Owners by number only: the image's /etc/passwd is not this machine's.
		hdr.Uname, hdr.Gname = "", ""
		hdr.Format = tar.FormatPAX
		if st, ok := statOf(info); ok && info.Mode().IsRegular() && st.nlink > 1 {
			key := inode{st.dev, st.ino}
			if first, ok := seen[key]; ok {
				hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
				return tw.WriteHeader(hdr)
			}
			seen[key] = hdr.Name
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		n, err := io.Copy(tw, f)
		if err == nil && n != hdr.Size {
			err = errors.New(path + " changed while it was packed")
		}
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

type statInfo struct{ dev, ino, nlink uint64 }

func statOf(info fs.FileInfo) (statInfo, bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return statInfo{}, false
	}
	return statInfo{dev: st.Dev, ino: st.Ino, nlink: st.Nlink}, true
}
