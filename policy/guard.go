package policy

import (
	"strings"

	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
)

// A guard is a test of one field that a rule's condition cannot hold
// without. Guards are read off the condition's checked syntax tree when it
// is compiled, and tested on the event before its program runs: a failed
// guard skips the program, whose result would be false. Most conditions
// are conjunctions led by such a test (file.access == "read" && …,
// http.secrets.exists(…)); the guard costs a comparison where the program
// costs a walk of its tree, and most events fail it.
type guard struct {
	field int     // index in schema.fields
	op    guardOp //
	lit   string  // for guardEquals and guardPrefix
}

type guardOp uint8

const (
	guardNonEmpty guardOp = iota // a list or map field is not empty
	guardEquals                  // a string field equals lit
	guardPrefix                  // a string field starts with lit
)

// guardsOf returns the guards of a checked condition.
func (s *schema) guardsOf(a *ast.AST) []guard {
	return s.guards(a.Expr(), a.ReferenceMap())
}

// guards returns tests that e, a boolean expression, cannot be true
// without. Only a conjunction passes on the guards of its two sides: a
// disjunction or a negation passes on none.
func (s *schema) guards(e ast.Expr, refs map[int64]*ast.ReferenceInfo) []guard {
	switch e.Kind() {
	case ast.CallKind:
		c := e.AsCall()
		args := c.Args()
		switch fn := c.FunctionName(); {
		case fn == operators.LogicalAnd && len(args) == 2:
			return append(s.guards(args[0], refs), s.guards(args[1], refs)...)
		case fn == operators.Equals && len(args) == 2:
			if g, ok := s.stringTest(guardEquals, args[0], args[1], refs); ok {
				return []guard{g}
			}
			if g, ok := s.stringTest(guardEquals, args[1], args[0], refs); ok {
				return []guard{g}
			}
		case fn == "startsWith" && c.IsMemberFunction() && len(args) == 1:
			if g, ok := s.stringTest(guardPrefix, c.Target(), args[0], refs); ok {
				return []guard{g}
			}
		}
	case ast.ComprehensionKind:
		// exists, and any comprehension like it: its result is its
		// accumulator, which starts false, so it is false over nothing.
		c := e.AsComprehension()
		init, result := c.AccuInit(), c.Result()
		if init.Kind() == ast.LiteralKind && init.AsLiteral() == types.False &&
			result.Kind() == ast.IdentKind && result.AsIdent() == c.AccuVar() {
			if f, ok := s.fieldOf(c.IterRange(), refs); ok {
				return []guard{{field: f, op: guardNonEmpty}}
			}
		}
	}
	return nil
}

// stringTest makes a guard of a field compared with a string literal.
func (s *schema) stringTest(op guardOp, field, lit ast.Expr, refs map[int64]*ast.ReferenceInfo) (guard, bool) {
	if lit.Kind() != ast.LiteralKind {
		return guard{}, false
	}
	v, ok := lit.AsLiteral().(types.String)
	if !ok {
		return guard{}, false
	}
	f, ok := s.fieldOf(field, refs)
	if !ok {
		return guard{}, false
	}
	return guard{field: f, op: op, lit: string(v)}, true
}

// fieldOf returns the field an expression reads whole, per the checker's
// references ("http.secrets" is a select of http, resolved to the field).
func (s *schema) fieldOf(e ast.Expr, refs map[int64]*ast.ReferenceInfo) (int, bool) {
	if k := e.Kind(); k != ast.IdentKind && k != ast.SelectKind {
		return 0, false
	}
	r := refs[e.ID()]
	if r == nil || r.Name == "" {
		return 0, false
	}
	return s.lookup(r.Name)
}

// passes reports whether v, the guard's field's value, passes it. A value
// of another type than the guard expects passes: the program decides.
func (g *guard) passes(v ref.Val) bool {
	switch g.op {
	case guardNonEmpty:
		if sz, ok := v.(traits.Sizer); ok {
			return sz.Size() != types.IntZero
		}
	case guardEquals:
		if s, ok := v.(types.String); ok {
			return string(s) == g.lit
		}
	case guardPrefix:
		if s, ok := v.(types.String); ok {
			return strings.HasPrefix(string(s), g.lit)
		}
	}
	return true
}
