package telemetry

import (
	"strings"
	"time"

	"github.com/chaperone-dev/chaperone/event"
)

// FoldInterval is how long at most a process's routine reads wait, folded,
// before their file_reads record is written: a long-lived process shows up
// in the log (and to `events --follow`) at least this often while it reads.
const FoldInterval = 5 * time.Second

// Bounds of the folded reads kept in memory: a file_reads record is
// written once its names take foldMaxBytes (its line stays far below
// MaxLineSize), and when maxFolds processes have reads folded, the oldest
// one's are written to make room.
const (
	foldMaxBytes = 64 << 10
	maxFolds     = 256
)

// readFold is one process's routine reads not yet written.
type readFold struct {
	session     string
	pid         int
	first, last time.Time
	count       int
	dirs        []*dirFold
	byDir       map[dirKey]*dirFold
	size        int // about the bytes of the record's line
}

type dirKey struct{ dir, rule string }

type dirFold struct {
	DirReads
	names map[string]struct{}
}

// fold adds e, a routine read of the process pe, to the process's folded
// reads.
func (a *AuditLog) fold(e *event.Event, pe *procEntry) error {
	f := a.folds[pe.id]
	if f == nil {
		if len(a.folds) >= maxFolds {
			if err := a.writeOldestFold(); err != nil {
				return err
			}
		}
		if a.folds == nil {
			a.folds = make(map[int64]*readFold)
		}
		if len(a.folds) == 0 {
			a.foldStart = e.Time
		}
		f = &readFold{session: e.Session, pid: pe.pid, first: e.Time, byDir: make(map[dirKey]*dirFold), size: 200}
		a.folds[pe.id] = f
		if a.after != nil && a.stopFold == nil {
			a.stopFold = a.after(FoldInterval, a.foldDue)
		}
	}
	path := e.File.Path
	if a.redact != nil {
		path = a.redact(path)
	}
	f.add(path, e.Verdict, e.Time)
	if f.size >= foldMaxBytes {
		return a.writeFold(pe.id, f)
	}
	return nil
}

// add counts a read of path at t, allowed by v, in f.
func (f *readFold) add(path string, v event.Verdict, t time.Time) {
	i := strings.LastIndexByte(path, '/')
	dir, name := path[:i+1], path[i+1:]
	if len(dir) > 1 {
		dir = dir[:len(dir)-1]
	}
	k := dirKey{dir: dir}
	if v.DecidedBy == event.DecidedByRule {
		k.rule = v.Rule
	}
	d := f.byDir[k]
	if d == nil {
		d = &dirFold{DirReads: DirReads{Dir: k.dir, Rule: k.rule}, names: make(map[string]struct{})}
		f.byDir[k] = d
		f.dirs = append(f.dirs, d)
		f.size += len(k.dir) + len(k.rule) + 40
	}
	d.Count++
	if _, ok := d.names[name]; !ok {
		d.names[name] = struct{}{}
		d.Files = append(d.Files, name)
		f.size += len(name) + 3
	}
	f.count++
	if t.Before(f.first) {
		f.first = t
	}
	if t.After(f.last) {
		f.last = t
	}
}

// record is f's file_reads record.
func (f *readFold) record() Record {
	r := Record{Time: f.first, Session: f.session, Kind: KindFileReads, Verdict: event.Allow,
		PID: f.pid, Count: f.count, Reads: make([]DirReads, len(f.dirs))}
	if f.last.After(f.first) {
		r.Until = f.last
	}
	for i, d := range f.dirs {
		r.Reads[i] = d.DirReads
	}
	return r
}

// writeFold writes the file_reads record of f, the folded reads of the
// process id, and forgets them.
func (a *AuditLog) writeFold(id int64, f *readFold) error {
	delete(a.folds, id)
	r := f.record()
	r.ProcessID = id
	if err := a.emit(&r, nil); err != nil {
		return err
	}
	a.pending += uint64(f.count)
	return nil
}

// writeFoldsOf writes the folded reads that match selects, oldest first.
func (a *AuditLog) writeFoldsOf(match func(*readFold) bool) error {
	for {
		var (
			oldest int64
			of     *readFold
		)
		for id, f := range a.folds {
			if match(f) && (of == nil || f.first.Before(of.first) || f.first.Equal(of.first) && id < oldest) {
				oldest, of = id, f
			}
		}
		if of == nil {
			return nil
		}
		if err := a.writeFold(oldest, of); err != nil {
			return err
		}
	}
}

// writeOldestFold writes the folded reads that began first.
func (a *AuditLog) writeOldestFold() error {
	var (
		oldest int64
		of     *readFold
	)
	for id, f := range a.folds {
		if of == nil || f.first.Before(of.first) || f.first.Equal(of.first) && id < oldest {
			oldest, of = id, f
		}
	}
	if of == nil {
		return nil
	}
	return a.writeFold(oldest, of)
}

// writeFolds writes every process's folded reads, oldest first; a.mu is
// held.
func (a *AuditLog) writeFolds() error {
	if a.closed {
		return nil
	}
	if a.err != nil { // never to be written: lost
		for id, f := range a.folds {
			a.lost.Add(uint64(f.count))
			delete(a.folds, id)
		}
		return nil
	}
	return a.writeFoldsOf(func(*readFold) bool { return true })
}

// foldDue writes the folded reads every FoldInterval while there are
// any, and flushes them.
func (a *AuditLog) foldDue() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stopFold = nil
	if a.closed || a.err != nil {
		return
	}
	if a.writeFolds() == nil {
		_ = a.flushLocked() // an error is kept as the log's (Err)
	}
}
