package proxy

import (
	"bufio"
	"bytes"
	"context"
	stdtls "crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/chaperone-dev/chaperone/event"
)

// grpcMaxMsg is the message size limit of both ends, above the 4 MiB
// default so that a 4 MiB payload and its framing fit.
const grpcMaxMsg = 8 << 20

// grpcWait bounds how long a test waits for the other side: a guard
// against a hang, not a measurement.
const grpcWait = 10 * time.Second

// grpcService is the interop TestService, as the cases below use it.
type grpcService struct {
	testpb.UnimplementedTestServiceServer

	// barrier, when above zero, holds every UnaryCall until that many have
	// arrived: the calls are then all in flight at once.
	barrier int
	mu      sync.Mutex
	arrived int
	all     chan struct{}

	// errHeader makes an error of UnaryCall follow a header; without it
	// the error is a trailers-only response: one HEADERS frame, which
	// ends the stream.
	errHeader bool

	// block makes FullDuplexCall send its header, take one message, close
	// started and wait for its context to end, whose error goes to ended.
	block   bool
	started chan struct{}
	ended   chan error
}

func newGRPCService() *grpcService {
	return &grpcService{all: make(chan struct{}), started: make(chan struct{}), ended: make(chan error, 1)}
}

// pattern is n bytes that differ with seed, so that a message cut,
// reordered or mixed with another does not compare equal.
func pattern(n, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + seed*13 + i>>8)
	}
	return b
}

// UnaryCall echoes the payload, with a header and a trailer, or answers
// the status asked for, with a detail.
func (s *grpcService) UnaryCall(ctx context.Context, req *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	grpc.SetTrailer(ctx, metadata.Pairs("x-up-trailer", "t1"))
	if s.barrier > 0 {
		s.mu.Lock()
		if s.arrived++; s.arrived == s.barrier {
			close(s.all)
		}
		s.mu.Unlock()
		select {
		case <-s.all:
		case <-ctx.Done():
			return nil, status.Error(codes.DeadlineExceeded, "not all calls arrived together")
		}
	}
	rs := req.GetResponseStatus()
	if rs.GetCode() == 0 || s.errHeader {
		grpc.SetHeader(ctx, metadata.Pairs("x-up-header", "h1"))
	}
	if rs.GetCode() != 0 {
		st, err := status.New(codes.Code(rs.GetCode()), rs.GetMessage()).WithDetails(&testpb.Payload{Body: []byte("detail in the trailers")})
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		return nil, st.Err()
	}
	return &testpb.SimpleResponse{Payload: &testpb.Payload{Body: req.GetPayload().GetBody()}}, nil
}

// StreamingOutputCall sends a message of pattern(size, i) for each of the
// request's response parameters.
func (s *grpcService) StreamingOutputCall(req *testpb.StreamingOutputCallRequest, stream grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	for i, p := range req.GetResponseParameters() {
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: pattern(int(p.GetSize()), i)}}); err != nil {
			return err
		}
	}
	return nil
}

// StreamingInputCall checks that message i is pattern(len, i) and answers
// the total size.
func (s *grpcService) StreamingInputCall(stream grpc.ClientStreamingServer[testpb.StreamingInputCallRequest, testpb.StreamingInputCallResponse]) error {
	total := 0
	for i := 0; ; i++ {
		req, err := stream.Recv()
		if err == io.EOF {
			return stream.SendAndClose(&testpb.StreamingInputCallResponse{AggregatedPayloadSize: int32(total)})
		}
		if err != nil {
			return err
		}
		body := req.GetPayload().GetBody()
		if !bytes.Equal(body, pattern(len(body), i)) {
			return status.Errorf(codes.DataLoss, "message %d is not what was sent", i)
		}
		total += len(body)
	}
}

// FullDuplexCall echoes each message as it comes, or blocks (see block).
func (s *grpcService) FullDuplexCall(stream grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
	if s.block {
		if err := stream.SendHeader(metadata.Pairs("x-blocked", "yes")); err != nil {
			return err
		}
		if _, err := stream.Recv(); err != nil {
			return err
		}
		close(s.started)
		<-stream.Context().Done()
		s.ended <- stream.Context().Err()
		return stream.Context().Err()
	}
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: req.GetPayload()}); err != nil {
			return err
		}
	}
}

// grpcUpstream is a way of serving gRPC upstream. upstream.Server is not
// one: it reads the first MiB of a request body before its handler runs,
// which a bidirectional stream, waiting for its first answer, never sends.
type grpcUpstream struct {
	name  string
	serve func(t *testing.T, ln net.Listener, tc *stdtls.Config, srv *grpc.Server)
}

var grpcUpstreams = []grpcUpstream{
	{"grpc-go transport", func(t *testing.T, ln net.Listener, tc *stdtls.Config, srv *grpc.Server) {
		// The server was made with these credentials: see startGRPC.
		go srv.Serve(ln)
		t.Cleanup(srv.Stop)
	}},
	{"net/http ServeHTTP", func(t *testing.T, ln net.Listener, tc *stdtls.Config, srv *grpc.Server) {
		var protos http.Protocols
		protos.SetHTTP2(true)
		hs := &http.Server{Handler: srv, TLSConfig: tc, Protocols: &protos}
		go hs.ServeTLS(ln, "", "")
		t.Cleanup(func() {
			hs.Close()
			srv.Stop()
		})
	}},
}

// startGRPC serves svc for name on 127.0.0.2 with a certificate of the
// upstream CA, makes the proxy resolve name to it, and returns name:port.
func (e *env) startGRPC(t *testing.T, u grpcUpstream, name string, svc *grpcService) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	ap := ln.Addr().(*net.TCPAddr).AddrPort()
	leaf, err := e.upCA.Leaf(name, ap.Addr().String())
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	tc := &stdtls.Config{Certificates: []stdtls.Certificate{leaf}, MinVersion: stdtls.VersionTLS12}
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(grpcMaxMsg)}
	if u.name == grpcUpstreams[0].name {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	srv := grpc.NewServer(opts...)
	testpb.RegisterTestServiceServer(srv, svc)
	u.serve(t, ln, tc, srv)
	e.namesMu.Lock()
	e.names[name] = ap.Addr()
	e.namesMu.Unlock()
	return net.JoinHostPort(name, fmt.Sprint(ap.Port()))
}

// dialTunnel opens a CONNECT tunnel to target through the proxy, with the
// session's token; it runs on grpc's goroutines, so it fails by error.
func (e *env) dialTunnel(ctx context.Context, target string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", e.addr)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\nProxy-Authorization: " + basicAuth(proxyUser, testToken) + "\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		c.Close()
		return nil, err
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	switch {
	case err != nil:
	case resp.StatusCode != http.StatusOK:
		err = fmt.Errorf("CONNECT %s: %s", target, resp.Status)
	case br.Buffered() > 0:
		err = fmt.Errorf("CONNECT %s: bytes after the response", target)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	if !stop() {
		c.Close()
		return nil, ctx.Err()
	}
	return c, nil
}

// grpcClient returns a client of the TestService at target (name:port)
// whose connections go through the proxy, counted in dials. The target is
// passed through as it is: never resolved.
func (e *env) grpcClient(t *testing.T, target string, dials *atomic.Int32) testpb.TestServiceClient {
	t.Helper()
	name, _, err := net.SplitHostPort(target)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("passthrough:///"+target,
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			dials.Add(1)
			return e.dialTunnel(ctx, addr)
		}),
		grpc.WithTransportCredentials(credentials.NewTLS(&stdtls.Config{RootCAs: e.caPool, ServerName: name})),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(grpcMaxMsg)),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return testpb.NewTestServiceClient(cc)
}

// grpcEvents waits for n http events of requests to target and returns
// those there are then.
func (e *env) grpcEvents(t *testing.T, target string, n int) []*event.Event {
	t.Helper()
	prefix := "https://" + target + "/"
	deadline := time.Now().Add(grpcWait)
	for {
		var got []*event.Event
		for _, ev := range e.rec.kinds(event.KindHTTP) {
			if strings.HasPrefix(ev.HTTP.URL, prefix) {
				got = append(got, ev)
			}
		}
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d http events for %s, want %d; got %s", len(got), target, n, describe(e.rec.all()))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// unaryError is a case whose UnaryCall answers a status, with a detail
// and a trailer, after a header when withHeader.
func unaryError(withHeader bool) func(*testing.T, context.Context, testpb.TestServiceClient, *grpcService) {
	return func(t *testing.T, ctx context.Context, c testpb.TestServiceClient, _ *grpcService) {
		const msg = "quota exhausted: retry after 5s ✓" // percent-encoded on the wire
		var hdr, trl metadata.MD
		_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{ResponseStatus: &testpb.EchoStatus{Code: int32(codes.ResourceExhausted), Message: msg}}, grpc.Header(&hdr), grpc.Trailer(&trl))
		st, ok := status.FromError(err)
		if !ok || err == nil {
			t.Fatalf("UnaryCall: %v, want a status error", err)
		}
		if st.Code() != codes.ResourceExhausted || st.Message() != msg {
			t.Errorf("status %v %q, want %v %q", st.Code(), st.Message(), codes.ResourceExhausted, msg)
		}
		var details []string
		for _, d := range st.Details() {
			p, ok := d.(*testpb.Payload)
			if !ok {
				details = append(details, fmt.Sprintf("%T %v", d, d))
				continue
			}
			details = append(details, string(p.GetBody()))
		}
		if diff := cmp.Diff([]string{"detail in the trailers"}, details); diff != "" {
			t.Errorf("status details (-want +got):\n%s", diff)
		}
		var wantHdr []string
		if withHeader {
			wantHdr = []string{"h1"}
		}
		if diff := cmp.Diff(wantHdr, hdr.Get("x-up-header")); diff != "" {
			t.Errorf("header x-up-header (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"t1"}, trl.Get("x-up-trailer")); diff != "" {
			t.Errorf("trailer x-up-trailer (-want +got):\n%s", diff)
		}
	}
}

func TestGRPC(t *testing.T) {
	e := newEnv(t, envOptions{})
	type grpcCase struct {
		name   string
		method string // the RPCs' method
		calls  int    // how many RPCs the case makes, each an http event
		// cancelled: the client ends the RPC, so its event records an
		// error; every other exchange completes.
		cancelled bool
		setup     func(svc *grpcService)
		run       func(t *testing.T, ctx context.Context, c testpb.TestServiceClient, svc *grpcService)
	}
	cases := []grpcCase{
		{
			name: "unary", method: "UnaryCall", calls: 1,
			run: func(t *testing.T, ctx context.Context, c testpb.TestServiceClient, _ *grpcService) {
				var hdr, trl metadata.MD
				resp, err := c.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("hello through the proxy")}}, grpc.Header(&hdr), grpc.Trailer(&trl))
				if err != nil {
					t.Fatalf("UnaryCall: %v", err)
				}
				if diff := cmp.Diff("hello through the proxy", string(resp.GetPayload().GetBody())); diff != "" {
					t.Errorf("payload (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff([]string{"h1"}, hdr.Get("x-up-header")); diff != "" {
					t.Errorf("header x-up-header (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff([]string{"t1"}, trl.Get("x-up-trailer")); diff != "" {
					t.Errorf("trailer x-up-trailer (-want +got):\n%s", diff)
				}
			},
		},
		{
			name: "unary error status, trailers only", method: "UnaryCall", calls: 1,
			run: unaryError(false),
		},
		{
			name: "unary error status after a header", method: "UnaryCall", calls: 1,
			setup: func(svc *grpcService) { svc.errHeader = true },
			run:   unaryError(true),
		},
		{
			name: "unimplemented method", method: "UnimplementedCall", calls: 1,
			run: func(t *testing.T, ctx context.Context, c testpb.TestServiceClient, _ *grpcService) {
				_, err := c.UnimplementedCall(ctx, &testpb.Empty{})
				if st, _ := status.FromError(err); st.Code() != codes.Unimplemented || !strings.Contains(st.Message(), "UnimplementedCall") {
					t.Errorf("UnimplementedCall: %v, want code Unimplemented naming the method", err)
				}
			},
		},
		{
			name: "server streaming 100x64KiB", method: "StreamingOutputCall", calls: 1,
			run: func(t *testing.T, ctx context.Context, c testpb.TestServiceClient, _ *grpcService) {
				const n, size = 100, 64 << 10
				req := &testpb.StreamingOutputCallRequest{}
				for range n {
					req.ResponseParameters = append(req.ResponseParameters, &testpb.ResponseParameters{Size: size})
				}
				stream, err := c.StreamingOutputCall(ctx, req)
				if err != nil {
					t.Fatalf("StreamingOutputCall: %v", err)
				}
				for i := 0; ; i++ {
					resp, err := stream.Recv()
					if err == io.EOF {
						if i != n {
							t.Errorf("%d messages, want %d", i, n)
						}
						break
					}
					if err != nil {
						t.Fatalf("Recv after %d messages: %v", i, err)
					}
					if !bytes.Equal(resp.GetPayload().GetBody(), pattern(size, i)) {
						t.Fatalf("message %d: %d bytes, not what the server sent", i, len(resp.GetPayload().GetBody()))
					}
				}
			},
		},
		{
			name: "client streaming 8MiB in 32KiB", method: "StreamingInputCall", calls: 1,
			run: func(t *testing.T, ctx context.Context, c testpb.TestServiceClient, _ *grpcService) {
				const total, size = 8 << 20, 32 << 10
				stream, err := c.StreamingInputCall(ctx)
				if err != nil {
					t.Fatalf("StreamingInputCall: %v", err)
				}
				for i := range total / size {
					if err := stream.Send(&testpb.StreamingInputCallRequest{Payload: &testpb.Payload{Body: pattern(size, i)}}); err != nil {
						t.Fatalf("Send %d: %v", i, err) // io.EOF: the stream ended; CloseAndRecv would say why
					}
				}
				resp, err := stream.CloseAndRecv()
				if err != nil {
					t.Fatalf("CloseAndRecv: %v", err)
				}
				if got := resp.GetAggregatedPayloadSize(); got != total {
					t.Errorf("server received %d bytes, want %d", got, total)
				}
			},
		},
		{
			name: "full-duplex ping-pong 200", method: "FullDuplexCall", calls: 1,
			run: func(t *testing.T, ctx context.Context, c testpb.TestServiceClient, _ *grpcService) {
				stream, err := c.FullDuplexCall(ctx)
				if err != nil {
					t.Fatalf("FullDuplexCall: %v", err)
				}
				for i := range 200 {
					ping := fmt.Sprintf("ping %d", i)
					if err := stream.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte(ping)}}); err != nil {
						t.Fatalf("Send %d: %v", i, err)
					}
					resp, err := stream.Recv()
					if err != nil {
						t.Fatalf("Recv %d: %v", i, err)
					}
					if got := string(resp.GetPayload().GetBody()); got != ping {
						t.Fatalf("answer %d: %q, want %q", i, got, ping)
					}
				}
				if err := stream.CloseSend(); err != nil {
					t.Fatal(err)
				}
				if _, err := stream.Recv(); err != io.EOF {
					t.Errorf("Recv after CloseSend: %v, want EOF", err)
				}
			},
		},
		{
			name: "bidi cancelled by the client", method: "FullDuplexCall", calls: 1, cancelled: true,
			setup: func(svc *grpcService) { svc.block = true },
			run: func(t *testing.T, ctx context.Context, c testpb.TestServiceClient, svc *grpcService) {
				ctx, cancel := context.WithCancel(ctx)
				defer cancel()
				stream, err := c.FullDuplexCall(ctx)
				if err != nil {
					t.Fatalf("FullDuplexCall: %v", err)
				}
				if err := stream.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: []byte("hold")}}); err != nil {
					t.Fatalf("Send: %v", err)
				}
				// The header having come back, the proxy has a response to
				// record; the server then blocks until its context ends.
				hdr, err := stream.Header()
				if err != nil {
					t.Fatalf("Header: %v", err)
				}
				if diff := cmp.Diff([]string{"yes"}, hdr.Get("x-blocked")); diff != "" {
					t.Errorf("header x-blocked (-want +got):\n%s", diff)
				}
				select {
				case <-svc.started:
				case <-time.After(grpcWait):
					t.Fatal("the server never received the message")
				}
				cancel()
				select {
				case err := <-svc.ended:
					if err == nil {
						t.Error("the server's stream context ended without an error")
					}
				case <-time.After(grpcWait):
					t.Fatal("the server's stream context did not end after the client cancelled")
				}
				if _, err := stream.Recv(); status.Code(err) != codes.Canceled {
					t.Errorf("Recv after cancel: %v, want code Canceled", err)
				}
			},
		},
		{
			name: "50 concurrent unary on one connection", method: "UnaryCall", calls: 50,
			setup: func(svc *grpcService) { svc.barrier = 50 },
			run: func(t *testing.T, ctx context.Context, c testpb.TestServiceClient, _ *grpcService) {
				var wg sync.WaitGroup
				errs := make(chan error, 50)
				for i := range 50 {
					wg.Go(func() {
						body := fmt.Sprintf("call %02d", i)
						resp, err := c.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte(body)}})
						switch {
						case err != nil:
							errs <- fmt.Errorf("call %d: %w", i, err)
						case string(resp.GetPayload().GetBody()) != body:
							errs <- fmt.Errorf("call %d: answer %q, want %q", i, resp.GetPayload().GetBody(), body)
						}
					})
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Error(err)
				}
			},
		},
		{
			name: "unary 4MiB each way", method: "UnaryCall", calls: 1,
			run: func(t *testing.T, ctx context.Context, c testpb.TestServiceClient, _ *grpcService) {
				body := pattern(4<<20, 1)
				resp, err := c.UnaryCall(ctx, &testpb.SimpleRequest{Payload: &testpb.Payload{Body: body}})
				if err != nil {
					t.Fatalf("UnaryCall: %v", err)
				}
				if got := resp.GetPayload().GetBody(); !bytes.Equal(got, body) {
					t.Errorf("answer of %d bytes is not the %d sent", len(got), len(body))
				}
			},
		},
	}
	for ui, u := range grpcUpstreams {
		t.Run(u.name, func(t *testing.T) {
			for ci, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					svc := newGRPCService()
					if tc.setup != nil {
						tc.setup(svc)
					}
					// A name of its own: the case's events are told apart by it.
					target := e.startGRPC(t, u, fmt.Sprintf("c%d.u%d.grpc.test", ci, ui), svc)
					var dials atomic.Int32
					c := e.grpcClient(t, target, &dials)
					ctx, cancel := context.WithTimeout(context.Background(), grpcWait)
					defer cancel()
					tc.run(t, ctx, c, svc)
					if t.Failed() {
						return
					}
					if n := dials.Load(); n != 1 {
						t.Errorf("%d connections to the proxy, want 1", n)
					}
					evs := e.grpcEvents(t, target, tc.calls)
					if len(evs) != tc.calls {
						t.Errorf("%d http events, want %d:%s", len(evs), tc.calls, describe(evs))
					}
					path := "/grpc.testing.TestService/" + tc.method
					for _, ev := range evs {
						h := ev.HTTP
						if !strings.HasSuffix(h.URL, path) || h.Method != http.MethodPost || h.Status != http.StatusOK || h.Proto != "HTTP/2.0" {
							t.Errorf("event %s %s %s %d, want POST ...%s HTTP/2.0 200", h.Method, h.URL, h.Proto, h.Status, path)
						}
						if tc.cancelled != (h.Error != "") {
							t.Errorf("event error %q, want an error: %v", h.Error, tc.cancelled)
						}
					}
				})
			}
		})
	}
}
