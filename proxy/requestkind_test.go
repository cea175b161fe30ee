package proxy

import "testing"

func TestRequestKind(t *testing.T) {
	tests := []struct {
		in   string
		want protocol
	}{
		{"GET / HTTP/1.1\r\nHost: h\r\n\r\n", protoHTTP},
		{"GET http://h/ HTTP/1.1\r\n", protoHTTP},
		{"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", protoHTTP},
		{"GET /a-long-path-still-coming", protoHTTP}, // its start is net/http's
		{"CONNECT h:1 HTTP/1.1\r\n\r\n", protoRequestLine},
		{"connect h:1", protoRequestLine},
		{"GET  /x", protoRequestLine},
		{"\r\nGET /x HTTP/1.1\r\n", protoRequestLine},
		{"GET /x  HTTP/1.1\r\n", protoRequestLine},
		{"GET http://h/\r\n", protoRequestLine},
	}
	for _, tt := range tests {
		if got := requestKind([]byte(tt.in)); got != tt.want {
			t.Errorf("requestKind(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}
