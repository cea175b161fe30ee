// Package placeholder is the format of the placeholders a redactor puts in
// a secret's place and a restorer reads back: "[REDACTED:<rule-id>:<hex>]",
// the rule id in [a-z0-9-]+, at least MinHex lowercase hex digits, at most
// MaxLen bytes in all.
package placeholder

const (
	// Prefix starts every placeholder.
	Prefix = "[REDACTED:"
	// MaxLen bounds a placeholder's length, for stream restorers.
	MaxLen = 64
	// MinHex is the fewest hex digits a placeholder has.
	MinHex = 4
)

func isRuleByte(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' }
func isHexByte(c byte) bool  { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' }

// hasPrefix reports whether b starts with Prefix.
func hasPrefix[T string | []byte](b T) bool {
	if len(b) < len(Prefix) {
		return false
	}
	for i := range len(Prefix) {
		if b[i] != Prefix[i] {
			return false
		}
	}
	return true
}

// Len returns the length of the complete placeholder b starts with, or 0.
func Len[T string | []byte](b T) int {
	if !hasPrefix(b) {
		return 0
	}
	i := len(Prefix)
	for i < len(b) && i < MaxLen && isRuleByte(b[i]) {
		i++
	}
	if i == len(Prefix) || i >= len(b) || b[i] != ':' {
		return 0
	}
	i++
	h := i
	for i < len(b) && i < MaxLen && isHexByte(b[i]) {
		i++
	}
	if i-h < MinHex || i >= len(b) || b[i] != ']' || i+1 > MaxLen {
		return 0
	}
	return i + 1
}

// IsPartial reports whether t could grow into a placeholder: it is a
// proper prefix of one.
func IsPartial[T string | []byte](t T) bool {
	if len(t) == 0 || len(t) >= MaxLen {
		return false
	}
	if len(t) <= len(Prefix) {
		for i := range len(t) {
			if t[i] != Prefix[i] {
				return false
			}
		}
		return true
	}
	if !hasPrefix(t) {
		return false
	}
	i := len(Prefix)
	for i < len(t) && isRuleByte(t[i]) {
		i++
	}
	if i == len(t) {
		return true
	}
	if i == len(Prefix) || t[i] != ':' {
		return false
	}
	i++
	for i < len(t) && isHexByte(t[i]) {
		i++
	}
	return i == len(t)
}
