package telemetry

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chaperone-dev/chaperone/event"
)

// MaxLineSize is the longest audit log line readers accept. Write shortens
// the values of a record that would be longer (and marks it truncated).
const MaxLineSize = 1 << 20

// SyncInterval is how often at most the audit log asks the operating
// system to put written lines on disk (fsync). Lines reach the file itself
// (the page cache) at every flush, so a crash of Chaperone loses none that
// were flushed; a crash of the machine loses at most the lines written in
// the last SyncInterval.
const SyncInterval = time.Second

// outSize is how many bytes of complete lines are buffered before they are
// written out.
const outSize = 64 << 10

// ErrClosed is returned by writes to a closed AuditLog.
var ErrClosed = errors.New("telemetry: audit log closed")

// AuditLog appends events to a JSON Lines file. It is safe for concurrent
// use; lines are never interleaved. Lines are written out whole, several
// per write but never one split across two, so that sessions of several
// Chaperone processes can append to one file (O_APPEND) without tearing
// each other's lines.
type AuditLog struct {
	path string

	// syncMu serialises fsync with Close; taken before mu.
	syncMu sync.Mutex

	mu     sync.Mutex
	f      *os.File // nil when writing to a plain io.Writer
	w      io.Writer
	out    []byte // complete lines not yet written to w
	buf    []byte // the line being encoded (appendRecord)
	closed bool
	err    error // the first write error; once set, nothing more is written
	// failed holds err once it is set, for Err, which every decision of a
	// session calls: it does not wait for a batch being encoded under mu.
	failed atomic.Pointer[error]
	// pending counts the lines buffered since the last successful flush:
	// they are lost, and counted, if the next write fails.
	pending uint64

	// fsync: sync is nil when w is not a regular file.
	sync      func() error
	now       func() time.Time
	after     func(time.Duration, func()) (stop func() bool) // time.AfterFunc
	syncEvery time.Duration
	lastSync  time.Time
	unsynced  bool        // lines written to w since the last sync
	stopSync  func() bool // cancels the sync due, if one is

	lost atomic.Uint64

	redact func(string) string // nil: records are written as they are

	// The processes written (a "process" record each), by the event
	// process each was made from, and by session and the SHA-256 of the
	// record's encoding: a process is written once, and later records
	// name it by id. Events never change an *event.Process; one process may be
	// described by several (a cache's entries expire). Both are cleared
	// when procIDs reaches maxProcRecs: a process seen again is then
	// written again, under a new id.
	procs   map[*event.Process]*procEntry
	procIDs map[string]*procEntry
	lastID  int64

	// allReads writes every file read as a record of its own; else
	// routine reads (event.Routine) are folded into one file_reads record
	// per process (folds, by process id), written when it holds
	// foldMaxBytes of names, when its session ends, when the log closes,
	// when maxFolds processes have one, and every FoldInterval (stopFold
	// cancels the timer due; without a timer, at the first event
	// FoldInterval after foldStart).
	allReads  bool
	whole     func(path string) bool // reads always written whole; nil: none
	folds     map[int64]*readFold
	foldStart time.Time // the first read of folds, when it was empty
	stopFold  func() bool

	// rec is the record being written, here rather than on the stack:
	// filling it goes through event.Flat, past escape analysis.
	rec Record
}

// maxProcRecs bounds the processes an AuditLog remembers.
const maxProcRecs = 4096

// SetFileReads says whether every file read is recorded whole (all) or
// routine reads are folded (the default). Call it before the first Write.
func (a *AuditLog) SetFileReads(all bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.allReads = all
}

// SetWholeReads makes reads of the files for which whole reports true
// always recorded whole, routine or not: the session's protected files
// (its policy, its config, the plugins it runs). It may be called at any
// time.
func (a *AuditLog) SetWholeReads(whole func(path string) bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.whole = whole
}

// SetRedactor makes every later record pass its free text (command lines,
// URLs, paths) through redact, which replaces the secrets it finds. Call
// it before the first Write.
func (a *AuditLog) SetRedactor(redact func(string) string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.redact = redact
	clear(a.procs)
	clear(a.procIDs)
}

// OpenAuditLog opens path for appending, creating its parent directories
// (0700) and the file (0600) as needed. If the file ends in a partial line
// (a crash mid-write), a newline is added so the next record starts a line
// of its own.
func OpenAuditLog(path string) (*AuditLog, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("telemetry: create audit log directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("telemetry: open audit log: %w", err)
	}
	regular, err := endLine(f, path)
	if err != nil {
		f.Close()
		return nil, err
	}
	a := newAuditLog(f)
	a.f, a.path = f, path
	if regular { // devices and pipes have nothing to sync (and may refuse)
		a.sync, a.now, a.syncEvery = f.Sync, time.Now, SyncInterval
		a.after = func(d time.Duration, fn func()) func() bool { return time.AfterFunc(d, fn).Stop }
	}
	return a, nil
}

// endLine appends a newline to f if its last byte is not one, and reports
// whether f is a regular file. Readers skip the partial line so ended.
func endLine(f *os.File, path string) (regular bool, err error) {
	fi, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("telemetry: stat audit log: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return false, nil
	}
	if fi.Size() == 0 {
		return true, nil
	}
	r, err := os.Open(path)
	if err != nil {
		return true, fmt.Errorf("telemetry: read audit log: %w", err)
	}
	defer r.Close()
	last := make([]byte, 1)
	if _, err := r.ReadAt(last, fi.Size()-1); err != nil {
		return true, fmt.Errorf("telemetry: read audit log: %w", err)
	}
	if last[0] != '\n' {
		if _, err := f.Write([]byte{'\n'}); err != nil {
			return true, fmt.Errorf("telemetry: write audit log: %w", err)
		}
	}
	return true, nil
}

func newAuditLog(w io.Writer) *AuditLog {
	return &AuditLog{w: w}
}

// Path returns the file's path.
func (a *AuditLog) Path() string { return a.path }

// Write appends one line for e to the buffer; Flush, Run or Close write it
// out. After a write error every later call returns that error.
func (a *AuditLog) Write(e *event.Event) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.closed:
		return ErrClosed
	case a.err != nil:
		a.lost.Add(1)
		return a.err
	}
	if a.after == nil && len(a.folds) > 0 && e.Time.Sub(a.foldStart) >= FoldInterval {
		// No timer (not a regular file): the events' clock says when.
		if err := a.writeFolds(); err != nil {
			return err
		}
	}
	if e.Kind == event.KindSessionEnd {
		// The session's folded reads come before its end.
		if err := a.writeFoldsOf(func(f *readFold) bool { return f.session == e.Session }); err != nil {
			return err
		}
	}
	pe, err := a.process(e)
	if err != nil {
		return err
	}
	if pe != nil && !a.allReads && event.Routine(e) && (a.whole == nil || !a.whole(e.File.Path)) {
		return a.fold(e, pe)
	}
	r := &a.rec
	*r = Record{}
	flatRecords().record.Fill(r, e)
	if a.redact != nil {
		*r = r.redacted(a.redact)
	}
	var procJSON []byte
	switch {
	case pe != nil:
		r.ProcessID, r.PID = pe.id, pe.pid
	case e.Process != nil:
		// Outside any session (refused): inline, as an id is a
		// session's, and other Chaperone processes appending to the
		// file number theirs too.
		pr := a.inlineProcess(e.Process)
		r.Process, procJSON = pr, appendProcess(nil, pr)
	}
	if err := a.emit(r, procJSON); err != nil {
		return err
	}
	a.pending++
	return nil
}

// emit encodes r (whose process is already encoded as procJSON unless it
// is nil) and buffers its line, writing out the buffer first when the
// line would overflow it. The caller counts the events the line holds in
// pending.
func (a *AuditLog) emit(r *Record, procJSON []byte) error {
	if err := a.encode(r, procJSON); err != nil {
		return err
	}
	if len(a.buf) > MaxLineSize {
		t := r.truncated()
		if err := a.encode(&t, nil); err != nil {
			return err
		}
	}
	if len(a.out) > 0 && len(a.out)+len(a.buf) > outSize {
		if err := a.writeOut(); err != nil {
			a.fail(err, 1)
			return a.err
		}
	}
	a.out = append(a.out, a.buf...)
	return nil
}

// encode makes a.buf the line of r, whose process is already encoded as
// procJSON unless it is nil.
func (a *AuditLog) encode(r *Record, procJSON []byte) error {
	var ok bool
	if a.buf, ok = appendRecordProc(a.buf[:0], r, procJSON); ok {
		return nil
	}
	// A time outside what JSON can say: encoding/json has the error.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)               // URLs stay readable; the log is not HTML
	if err := enc.Encode(*r); err != nil { // a copy: r itself stays off the heap
		// Record holds only strings, numbers and text marshalers that
		// cannot fail; keep the log going but say so.
		return fmt.Errorf("telemetry: encode audit record: %w", err)
	}
	a.buf = append(a.buf[:0], buf.Bytes()...)
	return nil
}

// process returns the entry of e's acting process (nil for none, and
// for an event of no session), writing its process record first when the
// log has not named it yet in e's session.
func (a *AuditLog) process(e *event.Event) (*procEntry, error) {
	p := e.Process
	if p == nil || e.Session == "" {
		return nil, nil
	}
	if pe := a.procs[p]; pe != nil && pe.session == e.Session {
		return pe, nil
	}
	rec := a.inlineProcess(p)
	js := appendProcess(nil, rec)
	sum := sha256.Sum256(js)
	key := e.Session + "\x00" + string(sum[:])
	if pe := a.procIDs[key]; pe != nil {
		a.remember(p, key, pe)
		return pe, nil
	}
	a.lastID++
	pe := &procEntry{id: a.lastID, session: e.Session, pid: rec.PID}
	r := Record{Time: e.Time, Session: e.Session, Kind: KindProcess, Verdict: event.Allow, ProcessID: pe.id, Process: rec}
	if err := a.emit(&r, js); err != nil {
		return nil, err
	}
	a.remember(p, key, pe)
	return pe, nil
}

// inlineProcess is the record of p, clipped and redacted.
func (a *AuditLog) inlineProcess(p *event.Process) *Process {
	rec := processOf(p)
	if a.redact != nil {
		rec = rec.redacted(a.redact)
	}
	return rec
}

// remember keeps pe as the entry of p and of key, within maxProcRecs.
func (a *AuditLog) remember(p *event.Process, key string, pe *procEntry) {
	if a.procIDs == nil || len(a.procIDs) >= maxProcRecs {
		a.procs = make(map[*event.Process]*procEntry)
		a.procIDs = make(map[string]*procEntry)
	}
	if len(a.procs) >= 2*maxProcRecs {
		clear(a.procs)
	}
	a.procs[p] = pe
	a.procIDs[key] = pe
}

// procEntry is a process the log has written.
type procEntry struct {
	id      int64
	session string
	pid     int
}

// writeOut writes the buffered lines in one call: a file opened with
// O_APPEND receives them at its end as one piece.
func (a *AuditLog) writeOut() error {
	if len(a.out) == 0 {
		return nil
	}
	if _, err := a.w.Write(a.out); err != nil {
		return err
	}
	if cap(a.out) > 4*outSize { // after a huge line, do not keep its memory
		a.out = nil
	} else {
		a.out = a.out[:0]
	}
	a.pending = 0
	a.unsynced = a.sync != nil
	return nil
}

// fail records the first write error; the lines still buffered and extra
// more are lost with it, and counted.
func (a *AuditLog) fail(err error, extra uint64) {
	a.setErr(fmt.Errorf("telemetry: write audit log: %w", err))
	a.lost.Add(a.pending + extra)
	a.pending = 0
}

// Flush writes buffered lines to the file. It does not wait for them to
// be on disk: an fsync follows within SyncInterval, and at Close.
func (a *AuditLog) Flush() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.flushLocked()
}

func (a *AuditLog) flushLocked() error {
	if a.closed {
		return ErrClosed
	}
	if a.err != nil {
		return a.err
	}
	if err := a.writeOut(); err != nil {
		a.fail(err, 0)
		return a.err
	}
	if a.unsynced && a.stopSync == nil {
		// Never fsync here: Flush is on the path of every event, and an
		// fsync can take long. The timer's goroutine does it.
		wait := max(a.lastSync.Add(a.syncEvery).Sub(a.now()), 0)
		a.stopSync = a.after(wait, a.syncDue)
	}
	return nil
}

// syncDue puts the lines written so far on disk, without holding mu so that
// writes go on meanwhile. An fsync error is kept as the log's error: the
// lines written since the last sync may be lost, so the log is not to be
// trusted any more.
func (a *AuditLog) syncDue() {
	a.syncMu.Lock()
	defer a.syncMu.Unlock()
	a.mu.Lock()
	a.stopSync = nil
	if a.closed || a.err != nil || !a.unsynced {
		a.mu.Unlock()
		return
	}
	a.unsynced, a.lastSync = false, a.now()
	a.mu.Unlock()
	if err := a.sync(); err != nil {
		a.mu.Lock()
		if a.err == nil {
			a.setErr(fmt.Errorf("telemetry: sync audit log: %w", err))
		}
		a.mu.Unlock()
	}
}

// Err returns the first write error, or nil while the log is healthy.
func (a *AuditLog) Err() error {
	if p := a.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// setErr records err as the log's error; a.mu is held.
func (a *AuditLog) setErr(err error) {
	a.err = err
	a.failed.Store(&err)
}

// Lost returns how many events were not written because of a write error.
func (a *AuditLog) Lost() uint64 { return a.lost.Load() }

// FlushDelay is how long an entry may wait in memory for others to be
// written with it: Run wakes at most once every FlushDelay (sooner in a
// burst, see event.Subscription.Receive), so a follower sees an entry
// within about FlushDelay, and a busy session costs one write (and one
// wake of the writer) every FlushDelay rather than one per event. An entry
// that comes after a quiet moment is written at once. Each write is a
// system call of some 20 µs: at 1 ms, one request at a time through the
// proxy spent a twentieth of the proxy's CPU on them. What a crash of
// Chaperone's process can lose grows with it; what a crash of the machine
// loses is set by SyncInterval.
const FlushDelay = 10 * time.Millisecond

// Run writes every event of sub until its channel is closed. It wakes for
// an entry, writes it and every entry queued behind it, flushes, and waits
// FlushDelay before it wakes again (the buffer is flushed sooner when it
// fills, and the wait ends early when the queue is half full), and flushes
// at the end. sub should be Lossless.
//
// After a write error Run keeps draining the channel without writing (a
// lossless subscriber that stopped reading would block publishers and the
// Bus's Close forever), counts those events in Lost, and returns the error
// when the channel closes. Callers that must not run unaudited watch Err.
func (a *AuditLog) Run(sub *event.Subscription) error {
	var first error
	note := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	sub.Receive(FlushDelay, func(e *event.Event) { note(a.Write(e)) }, func() { note(a.Flush()) })
	return first
}

// Close flushes, syncs and closes the file. It is idempotent and safe on an
// AuditLog that never wrote; Run must have returned first.
func (a *AuditLog) Close() error {
	if a == nil {
		return nil
	}
	a.syncMu.Lock()
	defer a.syncMu.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	if a.stopFold != nil {
		a.stopFold()
		a.stopFold = nil
	}
	err := a.writeFolds()
	if ferr := a.flushLocked(); err == nil {
		err = ferr
	}
	a.closed = true
	if a.stopSync != nil {
		a.stopSync()
		a.stopSync = nil
	}
	if err == nil && a.unsynced {
		a.unsynced = false
		if serr := a.sync(); serr != nil {
			err = fmt.Errorf("telemetry: sync audit log: %w", serr)
		}
	}
	if a.f != nil {
		if cerr := a.f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("telemetry: close audit log: %w", cerr)
		}
	}
	return err
}
