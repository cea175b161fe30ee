package h1

// Tristate is a decision that may need more bytes.
type Tristate int

const (
	Maybe Tristate = iota // more bytes are needed
	Yes
	No
)
