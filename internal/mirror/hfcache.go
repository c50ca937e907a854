package mirror

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// An operator who has tried a model with huggingface_hub, llama.cpp's -hf
// or LM Studio's importer has its files in the Hugging Face cache already:
// <cache>/models--<owner>--<name>/blobs/<sha256> for each LFS file, with
// snapshots/<commit>/<path> linking to the blobs. Fetching 40 GB again that
// sits on the same disk wastes an hour. The blob's name is the sha256 the
// Hub published, so the mirror finds a file there by the sha256 it expects,
// whatever repository or model name it was fetched under, and still reads
// every byte to check it: a name is not a checksum.

// fromHFCache puts the file in place from the Hugging Face cache when a
// blob there has its size and sha256: hard-linked when the cache is on the
// mirror's filesystem (no bytes copied, no room taken), else copied. It
// returns false, and nothing changed, when no blob fits; a blob whose bytes
// do not match is logged and passed over for the registry.
func (m *Mirror) fromHFCache(ctx context.Context, fl *flight) (string, bool, error) {
	f := fl.file
	if m.opts.HFCache == "" || !sha256Pattern.MatchString(f.SHA256) {
		return "", false, nil
	}
	want := strings.ToLower(f.SHA256)
	blobs, _ := filepath.Glob(filepath.Join(m.opts.HFCache, "models--*", "blobs", want))
	for _, blob := range blobs {
		st, err := os.Stat(blob)
		if err != nil || !st.Mode().IsRegular() || st.Size() != f.Size {
			continue
		}
		sum, err := m.placeFromBlob(ctx, fl, blob)
		if err != nil {
			if ctx.Err() != nil {
				return "", false, ctx.Err()
			}
			m.log.Warn("mirror passed over a file of the Hugging Face cache", "model", f.Model, "path", f.Path, "blob", blob, "err", err)
			continue
		}
		m.log.Info("mirror took a file from the Hugging Face cache", "model", f.Model, "path", f.Path, "blob", blob)
		return sum, true, nil
	}
	return "", false, nil
}

// placeFromBlob links or copies blob to the flight's partial file, checks
// the sha256 of what landed there, and puts it in place with its sidecar.
// A partial download of the same file is replaced: the blob is whole.
func (m *Mirror) placeFromBlob(ctx context.Context, fl *flight, blob string) (string, error) {
	f, local, part := fl.file, fl.local, partialPath(fl.local)
	name := path.Base(f.Path)
	if err := os.Remove(part); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", writeErr("cannot replace the partial %s", name, err)
	}
	h := sha256.New()
	if err := os.Link(blob, part); err == nil {
		// The same bytes on disk: read once through the hash.
		file, err := os.Open(part)
		if err != nil {
			os.Remove(part)
			return "", err
		}
		err = hashInto(ctx, h, file, f.Size)
		file.Close()
		if err != nil {
			os.Remove(part)
			return "", err
		}
	} else if err := copyHashing(ctx, h, blob, part, func(n int64) { fl.bytes.Store(n) }); err != nil {
		os.Remove(part)
		return "", err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if !strings.EqualFold(sum, f.SHA256) {
		os.Remove(part)
		return "", fmt.Errorf("its bytes hash to %s, not the %s it is named for", short(sum), short(f.SHA256))
	}
	if err := os.Remove(sidecarPath(local)); err != nil && !errors.Is(err, os.ErrNotExist) {
		os.Remove(part)
		return "", writeErr("cannot replace %s", name, err)
	}
	if err := os.Rename(part, local); err != nil {
		os.Remove(part)
		return "", writeErr("cannot put %s in place", name, err)
	}
	if err := writeSidecar(local, sum); err != nil {
		return "", err
	}
	fl.bytes.Store(f.Size)
	return sum, nil
}

// copyHashing copies src to dst, hashing the bytes as they are written and
// reporting how many are, and syncs dst: the mirror's file must be on disk
// before it gets its name.
func copyHashing(ctx context.Context, h hash.Hash, src, dst string, done func(int64)) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return writeErr("cannot write %s", strings.TrimSuffix(filepath.Base(dst), partialSuffix), err)
	}
	defer out.Close()
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		k, rerr := in.Read(buf)
		if k > 0 {
			if _, err := out.Write(buf[:k]); err != nil {
				return writeErr("cannot write %s", strings.TrimSuffix(filepath.Base(dst), partialSuffix), err)
			}
			h.Write(buf[:k])
			n += int64(k)
			done(n)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	if err := out.Sync(); err != nil {
		return writeErr("cannot write %s", strings.TrimSuffix(filepath.Base(dst), partialSuffix), err)
	}
	return out.Close()
}
