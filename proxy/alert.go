package proxy

// TLS record framing (RFC 8446 5.1): type, version (3.x), length.
const (
	recordHeaderLen = 5
	recordAlert     = 21
	// recordApplicationData is also the outer type of every record that
	// TLS 1.3 encrypts.
	recordApplicationData = 23
	// recordMaxLen is the longest record body a peer may send (a TLS 1.2
	// ciphertext: 2^14 + 2048); longer is not TLS.
	recordMaxLen = 1<<14 + 2048
)

// alertSniffer reads the records a client sends, in pieces as they come,
// and keeps the first alert sent in the clear: a record of type alert
// whose body is two bytes (level, description). An encrypted alert is
// longer (TLS 1.2: MAC or tag; TLS 1.3: type application_data). It stops
// at the first alert, or at bytes that are not TLS records. Its zero
// value is ready.
type alertSniffer struct {
	hdr   [recordHeaderLen]byte
	nhdr  int // header bytes held
	left  int // body bytes of the current record still to come
	alert bool
	body  [2]byte
	nbody int

	found       bool // level and desc are the first alert in the clear
	level, desc uint8
	done        bool // found, or the bytes are not TLS records
	// data counts the application_data records begun.
	data int
}

// feed reads b, the next bytes of the stream.
func (s *alertSniffer) feed(b []byte) {
	for len(b) > 0 && !s.done {
		if s.left == 0 {
			n := copy(s.hdr[s.nhdr:], b)
			s.nhdr += n
			b = b[n:]
			if s.nhdr < recordHeaderLen {
				return
			}
			s.nhdr = 0
			typ, major, length := s.hdr[0], s.hdr[1], int(s.hdr[3])<<8|int(s.hdr[4])
			if typ < 20 || typ > 24 || major != 3 || length > recordMaxLen {
				s.done = true
				return
			}
			s.left = length
			if typ == recordApplicationData {
				s.data++
			}
			s.alert = typ == recordAlert && length == 2
			s.nbody = 0
			continue
		}
		n := min(s.left, len(b))
		if s.alert {
			s.nbody += copy(s.body[s.nbody:], b[:n])
		}
		s.left -= n
		b = b[n:]
		if s.left == 0 && s.alert {
			s.found, s.done = true, true
			s.level, s.desc = s.body[0], s.body[1]
		}
	}
}

// firstClearAlert is alertSniffer's rule applied to a whole stream at
// once: the reference the fuzz test holds the sniffer to. data counts the
// application_data records begun before it stopped.
func firstClearAlert(b []byte) (level, desc uint8, ok bool, data int) {
	for len(b) >= recordHeaderLen {
		typ, major, length := b[0], b[1], int(b[3])<<8|int(b[4])
		if typ < 20 || typ > 24 || major != 3 || length > recordMaxLen {
			break
		}
		if typ == recordApplicationData {
			data++
		}
		if len(b) < recordHeaderLen+length {
			break
		}
		if typ == recordAlert && length == 2 {
			return b[5], b[6], true, data
		}
		b = b[recordHeaderLen+length:]
	}
	return 0, 0, false, data
}
