package fileexec

import (
	"testing"
)

func TestDecodeNS(t *testing.T) {
	tests := []struct {
		name  string
		c     Call
		kind  nsCall
		flags uint64
	}{
		{"x86_64 unshare", Call{Arch: auditArchX86_64, Nr: 272, Args: [6]uint64{0x10020000}}, nsUnshare, 0x10020000},
		{"x86_64 clone, high half ignored", Call{Arch: auditArchX86_64, Nr: 56, Args: [6]uint64{0xdead000000020011}}, nsClone, 0x20011},
		{"x86_64 mount", Call{Arch: auditArchX86_64, Nr: 165}, nsMount, 0},
		{"x86_64 umount2", Call{Arch: auditArchX86_64, Nr: 166}, nsMount, 0},
		{"x86_64 pivot_root", Call{Arch: auditArchX86_64, Nr: 155}, nsMount, 0},
		{"i386 umount", Call{Arch: auditArchI386, Nr: 22}, nsMount, 0},
		{"i386 clone", Call{Arch: auditArchI386, Nr: 120, Args: [6]uint64{cloneNewNS}}, nsClone, cloneNewNS},
		{"aarch64 unshare", Call{Arch: auditArchAArch64, Nr: 97, Args: [6]uint64{cloneNewCgroup}}, nsUnshare, cloneNewCgroup},
		{"aarch64 pivot_root", Call{Arch: auditArchAArch64, Nr: 41}, nsMount, 0},
		{"arm pivot_root", Call{Arch: auditArchARM, Nr: 218}, nsMount, 0},
		{"x86_64 link is not one", Call{Arch: auditArchX86_64, Nr: 86}, nsNone, 0},
		{"aarch64 nr 56 is not clone", Call{Arch: auditArchAArch64, Nr: 56}, nsNone, 0},
		{"unknown arch", Call{Arch: 1, Nr: 272}, nsNone, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kind, flags := decodeNS(tt.c)
			if kind != tt.kind || flags != tt.flags {
				t.Errorf("decodeNS = %v %#x, want %v %#x", kind, flags, tt.kind, tt.flags)
			}
		})
	}
}

// A path of a nested namespace, translated through its mount to a path
// in the filesystem, then through a mount of the session's namespace.
func TestMountPaths(t *testing.T) {
	tests := []struct {
		name         string
		nested       mount
		p            string
		fsPath       string
		session      mount
		sessionPath  string
		inOK, sameOK bool
	}{
		{
			name:   "bind of a directory elsewhere",
			nested: mount{Root: "/home/u/.ssh", Point: "/tmp/x"}, p: "/tmp/x/id_rsa", fsPath: "/home/u/.ssh/id_rsa", inOK: true,
			session: mount{Root: "/", Point: "/"}, sessionPath: "/home/u/.ssh/id_rsa", sameOK: true,
		},
		{
			name:   "the mount point itself",
			nested: mount{Root: "/srv", Point: "/mnt"}, p: "/mnt", fsPath: "/srv", inOK: true,
			session: mount{Root: "/srv", Point: "/data"}, sessionPath: "/data", sameOK: true,
		},
		{
			name:   "a session mount of a subdirectory",
			nested: mount{Root: "/", Point: "/"}, p: "/home/u/work/f", fsPath: "/home/u/work/f", inOK: true,
			session: mount{Root: "/home/u", Point: "/h"}, sessionPath: "/h/work/f", sameOK: true,
		},
		{
			name:   "outside the session mount's directory",
			nested: mount{Root: "/", Point: "/"}, p: "/etc/passwd", fsPath: "/etc/passwd", inOK: true,
			session: mount{Root: "/home", Point: "/"}, sameOK: false,
		},
		{
			name:   "a prefix that is not a directory",
			nested: mount{Root: "/", Point: "/tmp/x"}, p: "/tmp/xy/f", inOK: false,
		},
		{
			name:   "a pseudo filesystem's root",
			nested: mount{Root: "net:[4026531840]", Point: "/run/netns/a"}, p: "/run/netns/a", inOK: false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsPath, ok := inMount(tt.nested, tt.p)
			if ok != tt.inOK || fsPath != tt.fsPath {
				t.Fatalf("inMount = %q, %v; want %q, %v", fsPath, ok, tt.fsPath, tt.inOK)
			}
			if !ok {
				return
			}
			sp, ok := atMount(tt.session, fsPath)
			if ok != tt.sameOK || sp != tt.sessionPath {
				t.Errorf("atMount = %q, %v; want %q, %v", sp, ok, tt.sessionPath, tt.sameOK)
			}
		})
	}
}

func TestOwnFS(t *testing.T) {
	for fstype, want := range map[string]bool{
		"tmpfs": true, "ramfs": true, "fuse": true, "fuse.sshfs": true,
		"overlay": false, "ext4": false, "fuseblk": false, "proc": false,
	} {
		if got := ownFS(fstype); got != want {
			t.Errorf("ownFS(%q) = %v, want %v", fstype, got, want)
		}
	}
}
