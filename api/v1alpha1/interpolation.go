/*
Copyright 2026 The fairqueue Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package v1alpha1

import (
	"fmt"
	"strings"
)

// This file implements the ${VAR} interpolation of weights identities. The
// grammar matches the CEL rules on TenantWeight.identity and FairQueuing:
//
//	$$       a literal '$'
//	${NAME}  the value of variable NAME
//	$NAME    the value of variable NAME, NAME being as long as possible
//
// where NAME is a letter or '_' followed by letters, digits and '_'. Any other
// '$' is a syntax error.

// UnresolvedVariableError is returned by Expand when lookup does not know a
// referenced variable.
type UnresolvedVariableError struct {
	// Name is the variable that could not be resolved.
	Name string
}

// Error names the variable and says where it should come from.
func (e *UnresolvedVariableError) Error() string {
	return fmt.Sprintf("variable %q is not set: add it as a data key of a Secret listed in weightsFrom", e.Name)
}

// VarRefs returns the names of the variables referenced by s, each once, in
// order of first appearance. Malformed references are skipped; the API server
// rejects them before the operator sees them, and Expand reports them.
func VarRefs(s string) []string {
	var names []string
	_ = scan(s, func(literal string) {}, func(name string) error {
		for _, n := range names {
			if n == name {
				return nil
			}
		}
		names = append(names, name)
		return nil
	}, false)
	return names
}

// Expand replaces every variable reference in s with its value from lookup and
// every "$$" with "$". It fails on a malformed reference, and with an
// *UnresolvedVariableError on the first variable lookup does not know.
func Expand(s string, lookup func(name string) (string, bool)) (string, error) {
	if !strings.Contains(s, "$") {
		return s, nil
	}
	var b strings.Builder
	b.Grow(len(s))
	err := scan(s, func(literal string) { b.WriteString(literal) }, func(name string) error {
		v, ok := lookup(name)
		if !ok {
			return &UnresolvedVariableError{Name: name}
		}
		b.WriteString(v)
		return nil
	}, true)
	if err != nil {
		return "", err
	}
	return b.String(), nil
}

// scan walks s, passing literal text to literal and variable names to ref. A
// malformed reference is an error when strict is true and is skipped
// otherwise.
func scan(orig string, literal func(string), ref func(string) error, strict bool) error {
	s := orig
	for pos := 0; len(s) > 0; pos = len(orig) - len(s) {
		i := strings.IndexByte(s, '$')
		if i < 0 {
			literal(s)
			return nil
		}
		literal(s[:i])
		rest := s[i+1:]
		switch {
		case strings.HasPrefix(rest, "$"):
			literal("$")
			s = rest[1:]
			continue
		case strings.HasPrefix(rest, "{"):
			end := strings.IndexByte(rest, '}')
			if end > 0 {
				if name := rest[1:end]; isVarName(name) {
					if err := ref(name); err != nil {
						return err
					}
					s = rest[end+1:]
					continue
				}
			}
		default:
			if n := varNameLen(rest); n > 0 {
				if err := ref(rest[:n]); err != nil {
					return err
				}
				s = rest[n:]
				continue
			}
		}
		if strict {
			return fmt.Errorf("malformed variable reference at byte %d: write ${NAME} or $NAME (letters, digits and '_', not starting with a digit), or $$ for a literal '$'", pos+i)
		}
		literal("$")
		s = rest
	}
	return nil
}

// varNameLen returns the length of the variable name at the start of s, or 0.
func varNameLen(s string) int {
	n := 0
	for n < len(s) && isNameByte(s[n], n == 0) {
		n++
	}
	return n
}

// isVarName reports whether s is a whole variable name.
func isVarName(s string) bool {
	return s != "" && varNameLen(s) == len(s)
}

func isNameByte(c byte, first bool) bool {
	switch {
	case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		return true
	default:
		return !first && '0' <= c && c <= '9'
	}
}
