package telemetry

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/chaperone-dev/chaperone/event"
)

// LogIndex follows an audit log as it grows and indexes it by session:
// each session's summary (SessionCounter), a few bytes per record (where
// its line is, its time, kind, verdict and pid), and its processes. A
// record itself stays on disk until Read asks for it, so a session of
// 100,000 records costs a few MB, and a page of it a few reads.
//
// Poll reads what was appended since the last call: complete lines only
// (a partially written last line waits for its newline), each torn or bad
// line skipped and counted (Skipped). When the file is truncated or
// replaced, the index starts over. A LogIndex is safe for concurrent use:
// one caller polls, any number read.
type LogIndex struct {
	path string

	mu       sync.RWMutex
	file     *os.File
	info     os.FileInfo
	offset   int64 // bytes of complete lines consumed
	lines    int
	skipped  int
	procs    map[procKey]*Process
	sessions map[string]*indexedSession
	order    []*indexedSession
	gen      int                   // incremented when the index starts over
	keep     bool                  // Poll keeps the records it reads
	kinds    map[string]event.Kind // interned kind names
	buf      []byte
	pending  []byte
}

// IndexEntry is one record of a session as the index keeps it.
type IndexEntry struct {
	Off     int64 // where its line starts in the file
	Len     int32 // its line's length, newline excluded
	PID     int32 // the acting process's pid, 0 for none
	Count   int32 // reads folded in a file_reads record; 1 for others
	Time    int64 // Unix nanoseconds
	Kind    event.Kind
	Verdict event.Action
	// Routine says it records routine file reads (RoutineRecord, with
	// its session's workdir and home): a file_reads record, or a file
	// record the live views fold.
	Routine bool
	// Proc is the process its ProcessID named when it was written (a
	// writer that reopens the log numbers its processes anew).
	Proc *Process
}

// indexedSession is one session of an indexed log, read and written under
// the index's lock.
type indexedSession struct {
	ID      string
	counter *SessionCounter
	entries []IndexEntry // process records left out; seq = position + 1
	groups  map[procGroupKey]*procGroup
	gorder  []*procGroup
	// From its session_start record: for RoutineRecord.
	workdir, home string
	// lastToolCall is the time of its latest llm record that named
	// tool calls (Unix ns), 0 for none.
	lastToolCall int64
	// links are its llm records that named tool calls and its exec
	// records, as the tool linker reads them (LinkRecords).
	links []linkRecord
}

// linkRecord is an llm or exec record, as much of it as LinkToolCalls
// reads.
type linkRecord struct {
	pos       int32 // in the session's entries
	kind      event.Kind
	verdict   event.Action
	pid       int
	time      time.Time
	process   *Process
	toolCalls []event.ToolCall
	latencyMS int64
}

// procGroup is one process (as one process record names it) of a
// session: its first record, stripped to what ProcessTree reads, and how
// many of the session's records it made.
type procGroup struct {
	First   Record
	Actions int
	Denials int
}

type procGroupKey struct {
	proc *Process // the process record's, shared by the records naming it
	pid  int
	name string
}

func groupKeyOf(r *Record) procGroupKey {
	switch {
	case r.ProcessID != 0 && r.Process != nil:
		return procGroupKey{proc: r.Process}
	case r.Process != nil:
		return procGroupKey{pid: r.Process.PID, name: ProcessName(r.Process)}
	default:
		return procGroupKey{pid: r.PID}
	}
}

// NewLogIndex returns an index of the audit log at path, which need not
// exist yet; nothing is read before Poll.
func NewLogIndex(path string) *LogIndex {
	return &LogIndex{path: path}
}

// Path is the log's path.
func (x *LogIndex) Path() string { return x.path }

// IndexedRecord is a record Poll found: its session and its 1-based
// position there (seq), stable until the index starts over.
type IndexedRecord struct {
	Seq     int
	Record  Record
	Routine bool // as IndexEntry.Routine
}

// PollResult says what one Poll found.
type PollResult struct {
	// Reset says the index started over (the log was truncated, replaced
	// or removed): every session is to be forgotten and read again.
	Reset bool
	// Records are the new records of sessions, in log order, when Poll
	// was asked for them.
	Records []IndexedRecord
}

// Poll reads the lines appended since the last Poll and indexes them; with
// records, its result holds them too.
func (x *LogIndex) Poll(records bool) (PollResult, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	var res PollResult
	x.keep = records
	if x.file != nil {
		cur, err := os.Stat(x.path)
		switch {
		case errors.Is(err, os.ErrNotExist), err == nil && !os.SameFile(x.info, cur), err == nil && cur.Size() < x.offset:
			x.resetLocked()
			res.Reset = true
		case err != nil:
			return res, fmt.Errorf("telemetry: index audit log: %w", err)
		}
	}
	if x.file == nil {
		f, err := os.Open(x.path)
		if errors.Is(err, os.ErrNotExist) {
			return res, nil
		}
		if err != nil {
			return res, fmt.Errorf("telemetry: index audit log: %w", err)
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return res, fmt.Errorf("telemetry: index audit log: %w", err)
		}
		x.file, x.info = f, fi
	}
	if x.buf == nil {
		x.buf = make([]byte, 256<<10)
	}
	for {
		n, err := x.file.ReadAt(x.buf, x.offset+int64(len(x.pending)))
		if n > 0 {
			x.pending = append(x.pending, x.buf[:n]...)
			start := 0
			for {
				i := bytes.IndexByte(x.pending[start:], '\n')
				if i < 0 {
					break
				}
				x.indexLine(x.pending[start:start+i], x.offset+int64(start), &res)
				start += i + 1
			}
			x.offset += int64(start)
			x.pending = append(x.pending[:0], x.pending[start:]...)
			if len(x.pending) > MaxLineSize {
				// A line too long to be a record: skip it whole.
				x.skipped++
				x.offset += int64(len(x.pending))
				x.pending = x.pending[:0]
			}
		}
		if errors.Is(err, io.EOF) || n == 0 {
			return res, nil
		}
		if err != nil {
			return res, fmt.Errorf("telemetry: index audit log: %w", err)
		}
	}
}

func (x *LogIndex) resetLocked() {
	if x.file != nil {
		x.file.Close()
	}
	x.file, x.info, x.offset, x.lines, x.skipped = nil, nil, 0, 0, 0
	x.gen++
	x.procs, x.sessions, x.order = nil, nil, nil
	x.pending = x.pending[:0]
}

// indexLine indexes the line at off.
func (x *LogIndex) indexLine(line []byte, off int64, res *PollResult) {
	x.lines++
	trimmed := bytes.TrimSpace(line)
	if len(trimmed) == 0 {
		return
	}
	r, err := parseRecord(trimmed)
	if err != nil {
		x.skipped++ // torn by a crash, or not a record
		return
	}
	if r.Kind == KindProcess {
		if r.ProcessID != 0 && r.Process != nil {
			if x.procs == nil {
				x.procs = map[procKey]*Process{}
			}
			x.procs[procKey{r.Session, r.ProcessID}] = r.Process
		}
		return
	}
	if r.Session == "" {
		return // traffic of no session
	}
	if r.Process == nil && r.ProcessID != 0 {
		r.Process = x.procs[procKey{r.Session, r.ProcessID}]
	}
	s := x.sessions[r.Session]
	if s == nil {
		if x.sessions == nil {
			x.sessions = map[string]*indexedSession{}
		}
		s = &indexedSession{ID: r.Session, counter: NewSessionCounter(r.Session), groups: map[procGroupKey]*procGroup{}}
		x.sessions[r.Session] = s
		x.order = append(x.order, s)
	}
	s.counter.Add(r)
	switch r.Kind {
	case event.KindSessionStart:
		s.workdir, s.home = r.Workdir, r.Home
	case event.KindLLM:
		if len(r.ToolCalls) > 0 {
			s.lastToolCall = max(s.lastToolCall, r.Time.UnixNano())
		}
	}
	if r.Kind == event.KindLLM && len(r.ToolCalls) > 0 || r.Kind == event.KindExec {
		s.links = append(s.links, linkRecord{pos: int32(len(s.entries)), kind: x.intern(r.Kind), verdict: r.Verdict, pid: r.PID, time: r.Time,
			process: r.Process, toolCalls: r.ToolCalls, latencyMS: r.LatencyMS})
	}
	e := IndexEntry{Off: off, Len: int32(len(line)), Count: 1, Time: r.Time.UnixNano(),
		Kind: x.intern(r.Kind), Verdict: r.Verdict}
	if r.ProcessID != 0 {
		e.Proc = r.Process
	}
	switch r.Kind {
	case KindFileReads:
		e.Count, e.Routine = int32(r.Count), true
	case event.KindFile:
		e.Routine = RoutineRecord(&r, s.workdir, s.home)
	}
	switch {
	case r.Process != nil:
		e.PID = int32(r.Process.PID)
	default:
		e.PID = int32(r.PID)
	}
	s.entries = append(s.entries, e)
	if InProcessTree(r) {
		k := groupKeyOf(&r)
		g := s.groups[k]
		if g == nil {
			g = &procGroup{First: Record{Time: r.Time, Session: r.Session, Kind: e.Kind, Verdict: r.Verdict,
				Process: r.Process, ProcessID: r.ProcessID, PID: r.PID}}
			s.groups[k] = g
			s.gorder = append(s.gorder, g)
		}
		g.Actions++
		if r.Verdict == event.Deny {
			g.Denials++
		}
	}
	if x.keep {
		res.Records = append(res.Records, IndexedRecord{Seq: len(s.entries), Record: r, Routine: e.Routine})
	}
}

func (x *LogIndex) intern(k event.Kind) event.Kind {
	if i, ok := x.kinds[string(k)]; ok {
		return i
	}
	if x.kinds == nil {
		x.kinds = map[string]event.Kind{}
	}
	if len(x.kinds) < 256 {
		x.kinds[string(k)] = k
	}
	return k
}

// Skipped counts the lines Poll skipped: torn, or not records.
func (x *LogIndex) Skipped() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.skipped
}

// Sessions returns the summaries of the log's sessions, in the order they
// first appear.
func (x *LogIndex) Sessions() []SessionSummary {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make([]SessionSummary, 0, len(x.order))
	for _, s := range x.order {
		out = append(out, s.counter.Summary())
	}
	return out
}

// Session returns the summary of session id and whether the log has it.
func (x *LogIndex) Session(id string) (SessionSummary, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	s := x.sessions[id]
	if s == nil {
		return SessionSummary{}, false
	}
	return s.counter.Summary(), true
}

// Entries calls fn with session id's entries, in log order (entry i has
// seq i+1; fn must not change them), and returns the index's generation,
// for Read, and whether the session is known. fn runs under the index's
// read lock: Poll waits for it.
func (x *LogIndex) Entries(id string, fn func([]IndexEntry)) (gen int, ok bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	s := x.sessions[id]
	if s == nil {
		return x.gen, false
	}
	fn(s.entries[:len(s.entries):len(s.entries)])
	return x.gen, true
}

// Tree returns session id's process tree, as ProcessTree builds it from
// the first record of each process; each node's Records hold that one
// record per process (an exec that renames a process adds one), and
// count says how many records the process of such a record made
// (actions, denials). ok is false for an unknown session.
func (x *LogIndex) Tree(id string) (tops []*ProcNode, count func(Record) (actions, denials int), ok bool) {
	x.mu.RLock()
	s := x.sessions[id]
	if s == nil {
		x.mu.RUnlock()
		return nil, nil, false
	}
	sum := s.counter.Summary()
	firsts := make([]Record, len(s.gorder))
	counts := make(map[procGroupKey][2]int, len(s.gorder))
	for i, g := range s.gorder {
		firsts[i] = g.First
		counts[groupKeyOf(&g.First)] = [2]int{g.Actions, g.Denials}
	}
	x.mu.RUnlock()
	return ProcessTree(sum, firsts), func(r Record) (int, int) {
		c := counts[groupKeyOf(&r)]
		return c[0], c[1]
	}, true
}

// EntriesIn is Entries for a caller that took positions in generation
// gen: it fails with ErrIndexReset, without calling fn, when the index
// started over since.
func (x *LogIndex) EntriesIn(gen int, id string, fn func([]IndexEntry)) error {
	x.mu.RLock()
	defer x.mu.RUnlock()
	s := x.sessions[id]
	if gen != x.gen || s == nil {
		return ErrIndexReset
	}
	fn(s.entries[:len(s.entries):len(s.entries)])
	return nil
}

// Places returns session id's working tree and home, as its
// session_start record says (for RoutineRecord and ViewFold).
func (x *LogIndex) Places(id string) (workdir, home string) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if s := x.sessions[id]; s != nil {
		return s.workdir, s.home
	}
	return "", ""
}

// LinkRecords calls fn, in log order, with session id's llm records that
// named tool calls and its exec records, at their
// positions in the session's entries, up to position end (excluded), as
// far as LinkToolCalls reads them: the records that decide which call an
// action is linked to (its calls, and the processes started for them),
// kept in memory for it. Other records link nothing but themselves.
func (x *LogIndex) LinkRecords(gen int, id string, end int, fn func(pos int, r Record)) error {
	x.mu.RLock()
	defer x.mu.RUnlock()
	s := x.sessions[id]
	if gen != x.gen || s == nil {
		return ErrIndexReset
	}
	for _, l := range s.links[:s.linksBefore(end)] {
		fn(int(l.pos), Record{Time: l.time, Session: id, Kind: l.kind, Verdict: l.verdict, Process: l.process, PID: l.pid,
			ToolCalls: l.toolCalls, LatencyMS: l.latencyMS})
	}
	return nil
}

// linksBefore is how many of s's link records are before position end.
func (s *indexedSession) linksBefore(end int) int {
	return sort.Search(len(s.links), func(i int) bool { return int(s.links[i].pos) >= end })
}

// CountLinkRecords is how many records LinkRecords(gen, id, end, …) would
// pass.
func (x *LogIndex) CountLinkRecords(id string, end int) int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if s := x.sessions[id]; s != nil {
		return s.linksBefore(end)
	}
	return 0
}

// LastToolCall is the time of session id's latest llm record that named
// tool calls; zero for none (LinkToolCalls then links nothing).
func (x *LogIndex) LastToolCall(id string) time.Time {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if s := x.sessions[id]; s != nil && s.lastToolCall != 0 {
		return time.Unix(0, s.lastToolCall).UTC()
	}
	return time.Time{}
}

// Processes returns a process record (kind KindProcess, at its first
// action's time) for each process of session id, in the order they first
// acted: what the records of any part of the session name.
func (x *LogIndex) Processes(id string) []Record {
	x.mu.RLock()
	defer x.mu.RUnlock()
	s := x.sessions[id]
	if s == nil {
		return nil
	}
	var out []Record
	for _, g := range s.gorder {
		if g.First.Process != nil {
			out = append(out, Record{Time: g.First.Time, Session: id, Kind: KindProcess, Process: g.First.Process, PID: g.First.Process.PID})
		}
	}
	return out
}

// Read returns the records of entries taken in generation gen (see
// Entries), in their order, read from the log, with their processes put
// back. It fails with ErrIndexReset when the index started over since
// (their offsets may no longer hold the same lines).
func (x *LogIndex) Read(gen int, entries []IndexEntry) ([]Record, error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if gen != x.gen || x.file == nil {
		return nil, ErrIndexReset
	}
	out := make([]Record, 0, len(entries))
	var line []byte
	for _, e := range entries {
		if cap(line) < int(e.Len) {
			line = make([]byte, e.Len)
		}
		line = line[:e.Len]
		if _, err := x.file.ReadAt(line, e.Off); err != nil {
			return nil, fmt.Errorf("telemetry: read audit log: %w", err)
		}
		r, err := parseRecord(bytes.TrimSpace(line))
		if err != nil {
			return nil, fmt.Errorf("telemetry: read audit log at byte %d: %w", e.Off, err)
		}
		if r.Process == nil && r.ProcessID != 0 {
			r.Process = e.Proc
		}
		out = append(out, r)
	}
	return out, nil
}

// ErrIndexReset says a LogIndex started over since the entries read were
// taken.
var ErrIndexReset = errors.New("telemetry: the audit log was truncated or replaced")

// Close closes the log.
func (x *LogIndex) Close() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.file == nil {
		return nil
	}
	err := x.file.Close()
	x.resetLocked()
	return err
}

// EntryTime is e's time.
func (e IndexEntry) EntryTime() time.Time { return time.Unix(0, e.Time).UTC() }
