package mirror

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"modelserve/internal/operr"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// List returns every file the mirror knows of: present ones, partial ones,
// those being fetched and those whose last fetch failed, sorted by model,
// revision and path.
func (m *Mirror) List(ctx context.Context) ([]Entry, error) {
	byLocal := map[string]*Entry{}
	var order []string
	add := func(local string, e Entry) *Entry {
		if old, ok := byLocal[local]; ok {
			return old
		}
		byLocal[local] = &e
		order = append(order, local)
		return &e
	}

	err := filepath.WalkDir(m.dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			if p == m.dir {
				return err
			}
			return nil // a folder that vanished while being read
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !de.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(m.dir, p)
		if err != nil {
			return nil
		}
		parts := strings.SplitN(filepath.ToSlash(rel), "/", 3)
		if len(parts) < 3 {
			return nil
		}
		model, rev, fpath := parts[0], parts[1], parts[2]
		name := path.Base(fpath)
		isPartial := strings.HasSuffix(name, partialSuffix)
		if isPartial {
			fpath = strings.TrimSuffix(fpath, partialSuffix)
		} else if reserved(name) {
			return nil // a sidecar, read with its file
		}
		if checkNames(model, rev, fpath) != nil {
			return nil // not something the mirror put there
		}
		info, err := de.Info()
		if err != nil {
			return nil
		}
		local := strings.TrimSuffix(p, partialSuffix)
		if isPartial {
			e := add(local, Entry{Model: model, Revision: rev, Path: fpath, State: Partial})
			if e.State == Partial {
				have := info.Size()
				if n, ok := partialHave(local, -1); ok {
					have = n
				}
				e.Size, e.BytesDone, e.Modified = have, have, info.ModTime()
			}
			return nil
		}
		e := add(local, Entry{})
		// A present file outranks a partial one of the same name (a
		// fetch replacing a file whose sha256 changed).
		sum, _ := readSidecar(local)
		*e = Entry{Model: model, Revision: rev, Path: fpath, Size: info.Size(), SHA256: sum,
			State: Present, BytesDone: info.Size(), BytesTotal: info.Size(), Modified: info.ModTime()}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cannot list the mirror in %s: %w", m.dir, err)
	}

	m.mu.Lock()
	for local, fl := range m.flights {
		p := fl.progress()
		f := fl.file
		e := add(local, Entry{Model: f.Model, Revision: f.Revision, Path: f.Path})
		e.State, e.BytesDone, e.BytesTotal, e.Err = p.State, p.BytesDone, p.BytesTotal, ""
		e.Size = p.BytesDone
	}
	for local, fail := range m.failed {
		f := fail.file
		e := add(local, Entry{Model: f.Model, Revision: f.Revision, Path: f.Path, Modified: fail.at})
		if e.State == Present {
			continue // fetched again since, by hand or by another mirror
		}
		e.State, e.Err, e.BytesTotal = Failed, fail.err, f.Size
	}
	m.mu.Unlock()

	out := make([]Entry, 0, len(order))
	for _, local := range order {
		out = append(out, *byLocal[local])
	}
	slices.SortFunc(out, func(a, b Entry) int {
		return cmp.Or(cmp.Compare(a.Model, b.Model), cmp.Compare(a.Revision, b.Revision), cmp.Compare(a.Path, b.Path))
	})
	return out, nil
}

// Remove deletes a file from the mirror, with its sidecar and any partial
// copy, and the folders it leaves empty. It refuses while the file is being
// fetched, and while inUse (may be nil) says a running replica uses it: an
// engine that has the file mapped would go on, but the next one started
// from the same catalog entry would not find it.
func (m *Mirror) Remove(ctx context.Context, model, revision, p string, inUse func(localPath string) bool) error {
	local, err := m.LocalPath(model, revision, p)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if inUse != nil && inUse(local) {
		return operr.New(operr.Conflict, "%s of %s is used by a running replica; stop that replica before removing the file from the mirror", p, model)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if fl := m.flights[local]; fl != nil && fl.ctx.Err() == nil {
		return operr.New(operr.Conflict, "%s of %s is being fetched; cancel the job fetching it before removing it", p, model)
	}
	_, hadFailure := m.failed[local]
	delete(m.failed, local)
	removed := false
	for _, name := range []string{local, sidecarPath(local), sidecarPath(local) + tmpSuffix, partialPath(local),
		partsPath(local), partsPath(local) + tmpSuffix} {
		err := os.Remove(name)
		switch {
		case err == nil:
			removed = true
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("cannot remove %s from the mirror: %w", p, err)
		}
	}
	if !removed && !hadFailure {
		return operr.Wrap(operr.NotFound, ErrNotFound, "%s of %s at %s: %s", p, model, revision, ErrNotFound)
	}
	// Folders the file leaves empty go too, up to the mirror's own; the
	// first that is not empty stops it.
	for dir := filepath.Dir(local); dir != m.dir && strings.HasPrefix(dir, m.dir+string(filepath.Separator)); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break
		}
	}
	return nil
}
