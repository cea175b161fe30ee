// Command fakeagent stands for an agent in the daemon's end-to-end tests;
// the tests install it under an agent's name (claude).
//
//	fakeagent connect ADDR      connect first thing, send "ping\n", print the reply line
//	fakeagent wait ADDR...      for each line read on stdin, connect to the next ADDR as above
//	fakeagent exec CMD ARGS...  run a command, exit with its status
//
// A failed connection prints "error: ..." and exits 3.
package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: fakeagent connect ADDR | wait ADDR... | exec CMD ARGS...")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "connect":
		os.Exit(ping(os.Args[2]))
	case "wait":
		in := bufio.NewScanner(os.Stdin)
		fmt.Println("ready")
		for _, addr := range os.Args[2:] {
			if !in.Scan() {
				os.Exit(4)
			}
			ping(addr)
		}
	case "exec":
		cmd := exec.Command(os.Args[2], os.Args[3:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				os.Exit(ee.ExitCode())
			}
			fmt.Println("error:", err)
			os.Exit(3)
		}
	default:
		os.Exit(2)
	}
}

// ping connects to addr, sends a line and prints the reply: 0 when a
// reply came.
func ping(addr string) int {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		fmt.Println("error:", err)
		return 3
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		fmt.Println("error:", err)
		return 3
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		fmt.Println("error:", err)
		return 3
	}
	fmt.Print(line)
	return 0
}
