// Package ask holds actions that the policy says a person must decide, and
// takes the answers: from the terminal where the session runs, or from
// `chaperone approve|deny ID` over a local control socket.
//
// A question that nobody answers in time gets the policy's on_timeout
// verdict; one whose action is abandoned (the client went away, the
// session ended) is denied. Identical questions asked while one is open
// share it, and an "always" answer settles the same question for the rest
// of the session. Nothing the agent controls reaches the terminal
// unescaped.
//
// It imports only event and the standard library (and x/sys for peer
// credentials).
package ask
