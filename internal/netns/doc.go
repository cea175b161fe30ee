// Package netns makes network namespaces for tests: a namespace of its own
// with only a loopback interface, up, where a test's fake servers listen and
// the programs it runs start, so that nothing those programs try can reach
// the machine's network or its resolver.
//
// A namespace is entered per OS thread: Do runs a function on a thread
// that joins the namespace and leaves it afterwards (or, if it cannot
// leave, ends with the function's goroutine), so no other goroutine ever
// runs in it. Sockets opened and processes started by that
// function belong to the namespace for their whole life, wherever the
// goroutines that use them run later.
//
// Guarantees:
//   - New returns a namespace whose loopback interface is up: 127.0.0.0/8
//     and ::1 answer in it, and no other interface exists.
//   - Do never leaves a thread of the process in the namespace after it
//     returns; the function's goroutines other than its own do not run in it.
//   - Close releases the namespace's handle; the namespace lives on while
//     a socket or process holds it.
//
// Linux only; elsewhere New returns an error wrapping errors.ErrUnsupported.
// It needs CAP_SYS_ADMIN: without it New returns an error that is
// fs.ErrPermission. It imports the standard library and golang.org/x/sys
// only.
package netns
