package privdrop

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFromSudo(t *testing.T) {
	alice := account{UID: 1000, GID: 1000, Name: "alice", Home: "/home/alice", Groups: []int{1000, 27, 4}}
	found := func(uid int) (account, error) {
		if uid != 1000 {
			return account{}, errors.New("unknown user")
		}
		return alice, nil
	}
	tests := []struct {
		name    string
		env     map[string]string
		euid    int
		want    Options
		wantErr string
	}{
		{name: "not under sudo", env: map[string]string{}, euid: 0, want: Keep()},
		{name: "sudo but not root", env: map[string]string{"SUDO_UID": "1000", "SUDO_GID": "1000"}, euid: 1000, want: Keep()},
		{
			name: "invoking user",
			env:  map[string]string{"SUDO_UID": "1000", "SUDO_GID": "1000", "SUDO_USER": "alice"},
			euid: 0,
			want: Options{UID: 1000, GID: 1000, Groups: []int{4, 27, 1000}, Name: "alice", Home: "/home/alice"},
		},
		{
			name: "current gid differs from the primary group",
			env:  map[string]string{"SUDO_UID": "1000", "SUDO_GID": "50", "SUDO_USER": "alice"},
			euid: 0,
			want: Options{UID: 1000, GID: 50, Groups: []int{4, 27, 50, 1000}, Name: "alice", Home: "/home/alice"},
		},
		{
			name: "user not in the database",
			env:  map[string]string{"SUDO_UID": "2000", "SUDO_GID": "2001", "SUDO_USER": "bob"},
			euid: 0,
			want: Options{UID: 2000, GID: 2001, Groups: []int{2001}, Name: "bob"},
		},
		{name: "malformed uid", env: map[string]string{"SUDO_UID": "10a", "SUDO_GID": "1"}, euid: 0, wantErr: "SUDO_UID"},
		{name: "negative uid", env: map[string]string{"SUDO_UID": "-1", "SUDO_GID": "1"}, euid: 0, wantErr: "SUDO_UID"},
		{name: "reserved uid", env: map[string]string{"SUDO_UID": "4294967295", "SUDO_GID": "1"}, euid: 0, wantErr: "SUDO_UID"},
		{name: "no gid", env: map[string]string{"SUDO_UID": "1000"}, euid: 0, wantErr: "without SUDO_GID"},
		{name: "malformed gid", env: map[string]string{"SUDO_UID": "1000", "SUDO_GID": " 1"}, euid: 0, wantErr: "SUDO_GID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) string { return tt.env[k] }
			got, err := fromSudo(getenv, tt.euid, found)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("fromSudo() error = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("fromSudo(): %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("fromSudo() (-want +got):\n%s", diff)
			}
			if err := got.validate(); err != nil {
				t.Errorf("fromSudo() returned invalid options: %v", err)
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name    string
		o       Options
		wantErr string
	}{
		{name: "keep", o: Keep()},
		{name: "zero value", o: Options{}},
		{name: "user", o: Options{UID: 1000, GID: 1000, Groups: []int{4}}},
		{name: "gid only", o: Options{UID: -1, GID: 1000}},
		{name: "uid without gid", o: Options{UID: 1000, GID: -1}, wantErr: "uid set without gid"},
		{name: "uid below -1", o: Options{UID: -2, GID: 0}, wantErr: "out of range"},
		{name: "gid below -1", o: Options{UID: 1, GID: -2}, wantErr: "out of range"},
		{name: "negative group", o: Options{UID: -1, GID: -1, Groups: []int{-1}}, wantErr: "group -1 out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.o.validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("validate(): %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("validate() error = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestOptionsEnviron(t *testing.T) {
	env := []string{"PATH=/bin", "HOME=/root", "USER=root", "LOGNAME=root", "USER=dup", "X=HOME=y"}
	tests := []struct {
		name string
		o    Options
		want []string
	}{
		{name: "no user leaves env alone", o: Keep(), want: env},
		{
			name: "user and home",
			o:    Options{Name: "alice", Home: "/home/alice"},
			want: []string{"PATH=/bin", "X=HOME=y", "HOME=/home/alice", "USER=alice", "LOGNAME=alice"},
		},
		{
			name: "user without home keeps HOME",
			o:    Options{Name: "bob"},
			want: []string{"PATH=/bin", "HOME=/root", "X=HOME=y", "USER=bob", "LOGNAME=bob"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, tt.o.environ(env)); diff != "" {
				t.Errorf("environ() (-want +got):\n%s", diff)
			}
		})
	}
}
