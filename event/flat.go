package event

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"time"
	"unsafe"
)

// Flat copies events to and from a flat form: a struct type T whose
// members are tagged `json:"key"` with the Keys of the Fields it holds
// (the audit log's telemetry.Record, plugin.Event, and the "process"
// objects within them). The plan is made once, by reflection, and
// checked: each field in use must have a member of a type its value fits.
// Copying then costs one write per field. A Flat is safe for concurrent
// use.
//
// Conversions of the flat forms: an address is its "ip:port" string,
// absent when invalid; addresses are strings; a time is in UTC; a
// duration in an integer member is whole milliseconds; an integer in a
// pointer member is present even when 0 (session_end's exit_code).
type Flat[T any] struct {
	byKind [][]flatMember // by kindIndex
	unused []string       // keys of T's members that no field fills, sorted
}

// flatMember is one field and where T holds it, at off: put copies the
// field from the event's member to T's, take back. The copies of the
// common types are done in place (op); the others call put and take.
type flatMember struct {
	payload, offset uintptr // the Field's
	f               *Field
	off             uintptr
	op              copyOp
	sk, mk          reflect.Kind // an integer's kinds in the event and in T
	put, take       func(src, dst unsafe.Pointer)
}

type copyOp uint8

const (
	opOther copyOp = iota
	opString
	opBool
	opInt
	opStrings
	opTime
)

// kindIndex is k's index in Kinds; len(Kinds) for an unknown kind.
func kindIndex(k Kind) int {
	switch k {
	case KindSessionStart:
		return 0
	case KindSessionEnd:
		return 1
	case KindConnect:
		return 2
	case KindDNS:
		return 3
	case KindTLS:
		return 4
	case KindHTTP:
		return 5
	case KindLLM:
		return 6
	case KindFile:
		return 7
	case KindExec:
		return 8
	case KindPolicyReload:
		return 9
	case KindWS:
		return 10
	}
	return len(Kinds)
}

// NewFlat plans T for the fields of fields in use: the process's fields
// when process is set, the others when not.
func NewFlat[T any](fields []Field, use Use, process bool) (*Flat[T], error) {
	t := reflect.TypeFor[T]()
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("event: flat form %v is not a struct", t)
	}
	members := map[string]reflect.StructField{}
	for _, sf := range reflect.VisibleFields(t) {
		if key, _, _ := strings.Cut(sf.Tag.Get("json"), ","); key != "" && key != "-" && len(sf.Index) == 1 {
			members[key] = sf
		}
	}
	fl := &Flat[T]{byKind: make([][]flatMember, len(Kinds)+1)}
	used := map[string]bool{}
	for i := range fields {
		f := &fields[i]
		if f.In&use == 0 || f.IsProcess() != process {
			continue
		}
		sf, ok := members[f.Key]
		if !ok {
			return nil, fmt.Errorf("event: flat form %v has no member for %s (key %q)", t, f.Name, f.Key)
		}
		used[f.Key] = true
		put, take, err := converters(f.Type, f.goType.Kind(), sf.Type)
		if err != nil {
			return nil, fmt.Errorf("event: flat form %v: %s into %s: %w", t, f.Name, sf.Name, err)
		}
		m := flatMember{payload: f.payload, offset: f.offset, f: f, off: sf.Offset, put: put, take: take,
			sk: f.goType.Kind(), mk: sf.Type.Kind()}
		switch {
		case f.Type == TypeString && f.goType.Kind() == reflect.String && sf.Type.Kind() == reflect.String:
			m.op = opString
		case f.Type == TypeBool:
			m.op = opBool
		case f.Type == TypeInt && isInt(sf.Type.Kind()):
			m.op = opInt
		case f.Type == TypeStrings:
			m.op = opStrings
		case f.Type == TypeTime:
			m.op = opTime
		}
		for k := range fl.byKind {
			if k == len(Kinds) && f.Kinds == nil && f.FlatKinds == nil || k < len(Kinds) && f.InFlat(Kinds[k]) {
				fl.byKind[k] = append(fl.byKind[k], m)
			}
		}
	}
	for key := range members {
		if !used[key] {
			fl.unused = append(fl.unused, key)
		}
	}
	slices.Sort(fl.unused)
	return fl, nil
}

// Unused returns the keys of T's members that no field fills (sorted):
// the form's own members, such as the audit record's "truncated", or
// members left behind when a field was removed or renamed.
func (fl *Flat[T]) Unused() []string { return slices.Clone(fl.unused) }

func (fl *Flat[T]) members(k Kind) []flatMember { return fl.byKind[kindIndex(k)] }

// Fill sets the members of dst that hold the fields of e's kind which e
// has. Members of other fields are left as they are.
func (fl *Flat[T]) Fill(dst *T, e *Event) {
	base, ev := unsafe.Pointer(dst), unsafe.Pointer(e)
	for i := range fl.byKind[kindIndex(e.Kind)] {
		m := &fl.byKind[kindIndex(e.Kind)][i]
		var src unsafe.Pointer
		if m.payload == ownField {
			src = unsafe.Add(ev, m.offset)
		} else if p := *(*unsafe.Pointer)(unsafe.Add(ev, m.payload)); p != nil {
			src = unsafe.Add(p, m.offset)
		} else {
			continue
		}
		d := unsafe.Add(base, m.off)
		switch m.op {
		case opString:
			*(*string)(d) = *(*string)(src)
		case opBool:
			*(*bool)(d) = *(*bool)(src)
		case opInt:
			setInt(d, m.mk, getInt(src, m.sk))
		case opStrings:
			*(*[]string)(d) = *(*[]string)(src)
		case opTime:
			*(*time.Time)(d) = (*(*time.Time)(src)).UTC()
		default:
			m.put(src, d)
		}
	}
}

// Read sets the fields of e's kind from src (e.Kind must be set first),
// making the payloads they belong to: the flat form's event, as far as
// the form holds it.
func (fl *Flat[T]) Read(src *T, e *Event) {
	base := unsafe.Pointer(src)
	for _, m := range fl.members(e.Kind) {
		m.take(unsafe.Add(base, m.off), m.f.member(e, true))
	}
}

// converters returns how a field of type t, held in a member of Go kind
// sk, is put into a member of type mt (put) and taken back (take).
func converters(t Type, sk reflect.Kind, mt reflect.Type) (put, take func(src, dst unsafe.Pointer), err error) {
	mismatch := fmt.Errorf("a %v cannot hold it", mt)
	switch t {
	case TypeString:
		if mt.Kind() != reflect.String {
			return nil, nil, mismatch
		}
		cp := func(src, dst unsafe.Pointer) { *(*string)(dst) = *(*string)(src) }
		return cp, cp, nil
	case TypeBool:
		if mt.Kind() != reflect.Bool {
			return nil, nil, mismatch
		}
		cp := func(src, dst unsafe.Pointer) { *(*bool)(dst) = *(*bool)(src) }
		return cp, cp, nil
	case TypeInt, TypeDuration:
		scale := int64(1)
		if t == TypeDuration {
			scale = int64(time.Millisecond)
		}
		if mt.Kind() == reflect.Pointer {
			et := mt.Elem()
			ek := et.Kind()
			if !isInt(ek) {
				return nil, nil, mismatch
			}
			return func(src, dst unsafe.Pointer) {
					n := reflect.New(et).UnsafePointer()
					setInt(n, ek, getInt(src, sk)/scale)
					*(*unsafe.Pointer)(dst) = n
				}, func(src, dst unsafe.Pointer) {
					n := int64(0)
					if q := *(*unsafe.Pointer)(src); q != nil {
						n = getInt(q, ek) * scale
					}
					setInt(dst, sk, n)
				}, nil
		}
		mk := mt.Kind()
		if !isInt(mk) {
			return nil, nil, mismatch
		}
		return func(src, dst unsafe.Pointer) { setInt(dst, mk, getInt(src, sk)/scale) },
			func(src, dst unsafe.Pointer) { setInt(dst, sk, getInt(src, mk)*scale) }, nil
	case TypeStrings:
		return same[[]string](mt, mismatch)
	case TypeTime:
		if mt != reflect.TypeFor[time.Time]() {
			return nil, nil, mismatch
		}
		return func(src, dst unsafe.Pointer) { *(*time.Time)(dst) = (*(*time.Time)(src)).UTC() },
			func(src, dst unsafe.Pointer) { *(*time.Time)(dst) = *(*time.Time)(src) }, nil
	case TypeAddrPort:
		if mt.Kind() != reflect.String {
			return nil, nil, mismatch
		}
		return func(src, dst unsafe.Pointer) {
				if ap := *(*netip.AddrPort)(src); ap.IsValid() {
					*(*string)(dst) = ap.String()
				}
			}, func(src, dst unsafe.Pointer) {
				*(*netip.AddrPort)(dst), _ = netip.ParseAddrPort(*(*string)(src))
			}, nil
	case TypeAddrs:
		if mt != reflect.TypeFor[[]string]() {
			return nil, nil, mismatch
		}
		return func(src, dst unsafe.Pointer) {
				as := *(*[]netip.Addr)(src)
				if len(as) == 0 {
					return
				}
				out := make([]string, len(as))
				for i, a := range as {
					out[i] = a.String()
				}
				*(*[]string)(dst) = out
			}, func(src, dst unsafe.Pointer) {
				var as []netip.Addr
				for _, s := range *(*[]string)(src) {
					if a, err := netip.ParseAddr(s); err == nil {
						as = append(as, a)
					}
				}
				*(*[]netip.Addr)(dst) = as
			}, nil
	case TypeHeader:
		return same[map[string][]string](mt, mismatch)
	case TypeChanges:
		if mt != reflect.TypeFor[*Changes]() {
			return nil, nil, mismatch
		}
		// A Changes that records no change is none.
		return func(src, dst unsafe.Pointer) {
				if c := *(**Changes)(src); !c.Empty() {
					*(**Changes)(dst) = c
				}
			}, func(src, dst unsafe.Pointer) {
				*(**Changes)(dst) = *(**Changes)(src)
			}, nil
	case TypeToolCalls:
		return same[[]ToolCall](mt, mismatch)
	case TypeInts:
		return same[[]int](mt, mismatch)
	}
	return nil, nil, fmt.Errorf("unknown type %d", t)
}

// same copies a member of type V both ways as it is.
func same[V any](mt reflect.Type, mismatch error) (put, take func(src, dst unsafe.Pointer), err error) {
	if mt != reflect.TypeFor[V]() {
		return nil, nil, mismatch
	}
	cp := func(src, dst unsafe.Pointer) { *(*V)(dst) = *(*V)(src) }
	return cp, cp, nil
}

func isInt(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

func setInt(p unsafe.Pointer, k reflect.Kind, n int64) {
	switch k {
	case reflect.Int:
		*(*int)(p) = int(n)
	case reflect.Int8:
		*(*int8)(p) = int8(n)
	case reflect.Int16:
		*(*int16)(p) = int16(n)
	case reflect.Int32:
		*(*int32)(p) = int32(n)
	case reflect.Int64:
		*(*int64)(p) = n
	case reflect.Uint:
		*(*uint)(p) = uint(n)
	case reflect.Uint8:
		*(*uint8)(p) = uint8(n)
	case reflect.Uint16:
		*(*uint16)(p) = uint16(n)
	case reflect.Uint32:
		*(*uint32)(p) = uint32(n)
	case reflect.Uint64:
		*(*uint64)(p) = uint64(n)
	}
}

func getInt(p unsafe.Pointer, k reflect.Kind) int64 {
	switch k {
	case reflect.Int:
		return int64(*(*int)(p))
	case reflect.Int8:
		return int64(*(*int8)(p))
	case reflect.Int16:
		return int64(*(*int16)(p))
	case reflect.Int32:
		return int64(*(*int32)(p))
	case reflect.Int64:
		return *(*int64)(p)
	case reflect.Uint:
		return int64(*(*uint)(p))
	case reflect.Uint8:
		return int64(*(*uint8)(p))
	case reflect.Uint16:
		return int64(*(*uint16)(p))
	case reflect.Uint32:
		return int64(*(*uint32)(p))
	case reflect.Uint64:
		return int64(*(*uint64)(p))
	}
	return 0
}
