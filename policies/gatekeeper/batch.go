package gatekeeper

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/compositor-dev/compositor/policies/membudget"
)

// A Library evaluates all the constraints that match an object in one evaluation, a
// batch, rather than one evaluation per (object, constraint) pair: the fixed cost of an
// evaluation is paid once per object.
//
// The batch compiles a copy of its template's modules for every constraint, so that
// nothing one constraint's evaluation computes (and OPA caches for the rest of the
// evaluation) can be taken for another's, and so that no template sees or clashes with
// another: constraint N's copy has its template's package at data.__cN and its libs
// data.lib.X at data.__lN.X, every reference of its modules to its package or its libs
// rewritten alike; the root of data holds nothing else but the batch module's package.
// The batch's input is the review and the names of the constraints that matched
// (decided in Go, as before), and its query evaluates each one's violation:
//
//	direct := {n: v | some n in input.direct; v := data[n].violation}
//
// A template that reads of input only input.review and input.parameters, and uses no
// `with` (most do), is evaluated on the batch's input directly ("direct"): its copy's
// references to input.parameters read the constraint's parameters (input.params.__cN),
// and those to data.inventory the review's inventory (input.inventory). Any other
// template (one that reads input as a whole, say) is evaluated by a rule of the batch
// module with the very input the template's own query gives it, `with input as
// {"review": ..., "parameters": ...}` ("wrapped"), and data.inventory replaced as that
// query replaces it. (In a rule: the same `with` in a comprehension of the query sent
// OPA v1.22.2 into endless recursion.) A template whose relocation could change what
// it computes (its package under data.inventory, a read of rego.metadata, a rule or
// variable named data) is not batched, nor is one compiled with capabilities other
// than the library's first's.
//
// When the batch's evaluation fails (an evaluation error in some template, the
// deadline), the object's constraints are evaluated one by one, each with its
// template's own query, so that an error is attributed to its constraint and the
// others' verdicts stand.

// The batch module's file.
const batchFile = "batch.rego"

// batchModule evaluates the wrapped constraints of a batch; batchQuery the direct ones,
// and, when some wrapped ones matched, batchQueryWrapped both.
const (
	batchModule = `package __compositor_batch

wrapped[n] := v if {
	some n in input.wrapped
	v := data[n].violation with input as {"review": input.review, "parameters": input.params[n]}
}

wrapped[n] := v if {
	some n in input.wrappedReferential
	v := data[n].violation with input as {"review": input.review, "parameters": input.params[n]} with data.inventory as input.inventory
}
`
	batchQuery        = `direct := {n: v | some n in input.direct; v := data[n].violation}`
	batchQueryWrapped = batchQuery + "\nwrapped := data.__compositor_batch.wrapped"
)

var (
	templateIDs   atomic.Uint64
	inventoryRef  = ast.MustParseRef("data.inventory")
	parametersRef = ast.MustParseRef("input.parameters")
	metadataRefs  = []ast.Ref{ast.MustParseRef("rego.metadata.chain"), ast.MustParseRef("rego.metadata.rule")}
)

// How a constraint is evaluated in a batch.
type batchMode uint8

const (
	notBatched batchMode = iota
	direct
	wrapped
	wrappedReferential
)

// relocatable tells whether a template computes the same relocated: not when its
// package is under data.inventory (which a referential evaluation replaces), when it
// reads the paths of its rules (rego.metadata), or when "data" names anything but the
// root of a reference (a rule or a local variable, whose references are not data's).
func relocatable(own ast.Ref, modules map[string]*ast.Module) bool {
	if own.HasPrefix(inventoryRef) {
		return false
	}
	for _, m := range modules {
		metadata := false
		ast.WalkRefs(m, func(r ast.Ref) bool {
			metadata = metadata || slices.ContainsFunc(metadataRefs, func(x ast.Ref) bool { return r.Equal(x) })
			return metadata
		})
		if metadata || !onlyRefRoot(m, ast.DefaultRootDocument.Value.(ast.Var)) || definesRoot(m, ast.DefaultRootDocument.Value.(ast.Var)) {
			return false
		}
	}
	return true
}

// readsInputPlainly tells whether a template reads of input only input.review and
// input.parameters (each by that name) and uses no `with`: it may then be evaluated
// on the batch's input.
func readsInputPlainly(modules map[string]*ast.Module) bool {
	for _, m := range modules {
		ok := onlyRefRoot(m, ast.InputRootDocument.Value.(ast.Var)) && !definesRoot(m, ast.InputRootDocument.Value.(ast.Var))
		ast.WalkRefs(m, func(r ast.Ref) bool {
			if ok && r.HasPrefix(ast.InputRootRef) {
				s, isString := ast.String(""), false
				if len(r) > 1 {
					s, isString = r[1].Value.(ast.String)
				}
				ok = isString && (s == "review" || s == "parameters")
			}
			return !ok
		})
		ast.WalkExprs(m, func(e *ast.Expr) bool {
			ok = ok && len(e.With) == 0
			return !ok
		})
		if !ok {
			return false
		}
	}
	return true
}

// onlyRefRoot tells whether every occurrence of the variable v in m is the root of a
// reference: as many references start with it as there are occurrences of it.
func onlyRefRoot(m *ast.Module, v ast.Var) bool {
	vars, refs := 0, 0
	ast.WalkVars(m, func(x ast.Var) bool {
		if x.Equal(v) {
			vars++
		}
		return false
	})
	ast.WalkRefs(m, func(r ast.Ref) bool {
		if r[0].Value.Compare(v) == 0 {
			refs++
		}
		return false
	})
	return vars == refs
}

// definesRoot tells whether a rule of m is named v (Rego v0 lets a rule be named data
// or input, and its references then may not mean the document).
func definesRoot(m *ast.Module, v ast.Var) bool {
	return slices.ContainsFunc(m.Rules, func(r *ast.Rule) bool {
		return r.Head.Name.Equal(v) || (len(r.Head.Reference) > 0 && r.Head.Reference[0].Value.Compare(v) == 0)
	})
}

// batch is the constraints of a library compiled together.
type batch struct {
	key string
	// direct evaluates the direct constraints that matched (batchQuery), wrapped the
	// wrapped ones too (batchQueryWrapped).
	direct, wrapped rego.PreparedEvalQuery
	// slots are the constraints' modes and names (__cN), by index in the library.
	slots []batchSlot
	// params is input.params: every batched constraint's parameters by name.
	params *ast.Term
}

type batchSlot struct {
	mode batchMode
	name *ast.Term
}

// batches are the last batches compiled, most recent last: a library is rebuilt, with
// the same constraints, whenever one of them or a template changes, and at each of the
// constraint controller's resyncs.
var batches struct {
	sync.Mutex
	recent []*batch
}

const keptBatches = 4

// wrapAll makes every batched constraint wrapped: tests hold the wrapped evaluation to
// the same verdicts as the direct one.
var wrapAll atomic.Bool

// batchOf returns the batch of a library's constraints, from the cache or compiled;
// nil when fewer than two of them can be batched.
func batchOf(templates map[string]*Template, constraints []*Constraint) *batch {
	modes := make([]batchMode, len(constraints))
	var caps *ast.Capabilities
	capsSet := false
	n := 0
	var key strings.Builder
	for i, c := range constraints {
		t := templates[c.Kind]
		if !t.relocatable || t.modules == nil {
			key.WriteString("-\n")
			continue
		}
		// Templates compiled with capabilities other than the first's are left out.
		if !capsSet {
			caps, capsSet = t.caps, true
		}
		if t.caps != caps {
			key.WriteString("-\n")
			continue
		}
		switch {
		case t.plainInput && !wrapAll.Load():
			modes[i] = direct
		case t.Referential:
			modes[i] = wrappedReferential
		default:
			modes[i] = wrapped
		}
		n++
		fmt.Fprintf(&key, "%d %d %s\n", t.id, modes[i], c.params)
	}
	if n < 2 {
		return nil
	}
	batches.Lock()
	defer batches.Unlock()
	for i, b := range batches.recent {
		if b.key == key.String() {
			batches.recent = append(slices.Delete(batches.recent, i, i+1), b)
			return b
		}
	}
	b := compileBatch(templates, constraints, modes, caps)
	if b == nil {
		return nil
	}
	b.key = key.String()
	if len(batches.recent) == keptBatches {
		batches.recent = slices.Delete(batches.recent, 0, 1)
	}
	batches.recent = append(batches.recent, b)
	return b
}

// compileBatch compiles the constraints of modes (notBatched ones aside). A constraint
// whose copy the compiler refuses (with its template's code typed anew among others)
// is left out, and the rest compiled again; nil when fewer than two remain.
func compileBatch(templates map[string]*Template, constraints []*Constraint, modes []batchMode, caps *ast.Capabilities) *batch {
	for range 3 {
		b, refused, err := tryBatch(templates, constraints, modes, caps)
		if err == nil {
			return b
		}
		if len(refused) == 0 {
			return nil
		}
		for _, i := range refused {
			modes[i] = notBatched
		}
		if slices.IndexFunc(modes, func(m batchMode) bool { return m != notBatched }) < 0 {
			return nil
		}
	}
	return nil
}

func tryBatch(templates map[string]*Template, constraints []*Constraint, modes []batchMode, caps *ast.Capabilities) (*batch, []int, error) {
	b := &batch{slots: make([]batchSlot, len(constraints))}
	modules := map[string]*ast.Module{}
	params := ast.NewObject()
	count := 0
	var unmoved []int
	for i, c := range constraints {
		mode := modes[i]
		if mode == notBatched {
			continue
		}
		count++
		t := templates[c.Kind]
		id := strconv.Itoa(i)
		name := ast.StringTerm("__c" + id)
		b.slots[i] = batchSlot{mode: mode, name: name}
		params.Insert(name, c.params)
		for file, m := range t.modules {
			cp, ok := relocate(m, t.own, name, ast.StringTerm("__l"+id), mode == direct)
			if !ok {
				unmoved = append(unmoved, i)
				break
			}
			modules["c"+id+"/"+file] = cp
		}
	}
	if len(unmoved) > 0 {
		return nil, unmoved, errors.New("some templates cannot be relocated")
	}
	if count < 2 {
		return nil, nil, errors.New("fewer than two constraints to batch")
	}
	b.params = ast.NewTerm(params)
	m, err := ast.ParseModuleWithOpts(batchFile, batchModule, ast.ParserOptions{RegoVersion: ast.RegoV1})
	if err != nil {
		return nil, nil, err
	}
	modules[batchFile] = m
	compiler := ast.NewCompiler().WithCapabilities(caps).WithEnablePrintStatements(false)
	compiler.Compile(modules)
	if compiler.Failed() {
		return nil, refusedConstraints(compiler.Errors), compiler.Errors
	}
	for _, q := range []struct {
		query *rego.PreparedEvalQuery
		text  string
	}{{&b.direct, batchQuery}, {&b.wrapped, batchQueryWrapped}} {
		if *q.query, err = rego.New(rego.Compiler(compiler), rego.Query(q.text), rego.Capabilities(caps)).PrepareForEval(context.Background()); err != nil {
			return nil, nil, err
		}
	}
	return b, nil, nil
}

// relocate copies a module of a template into constraint name's place in a batch (see
// the top of this file); ok is false when some reference to what it moves is left.
func relocate(m *ast.Module, own ast.Ref, name, libs *ast.Term, plain bool) (_ *ast.Module, ok bool) {
	// Heads of its own: ast.DefaultRootDocument and ast.InputRootDocument are terms
	// every evaluation in the process reads, and ast.Transform writes back the value
	// of each term it visits, so a global placed in the copy would be written while
	// other templates evaluate (a data race, even with the same value).
	newOwn := ast.Ref{ast.VarTerm(ast.DefaultRootDocument.Value.String()), name}
	newLibs := ast.Ref{ast.VarTerm(ast.DefaultRootDocument.Value.String()), libs}
	params := ast.Ref{ast.VarTerm(ast.InputRootDocument.Value.String()), ast.StringTerm("params"), name}
	inventory := ast.Ref{ast.VarTerm(ast.InputRootDocument.Value.String()), ast.StringTerm("inventory")}
	move := func(r ast.Ref) (ast.Value, error) {
		switch {
		case r.HasPrefix(own):
			return newOwn.Concat(r[len(own):]), nil
		case r.HasPrefix(libRoot):
			return newLibs.Concat(r[len(libRoot):]), nil
		case plain && r.HasPrefix(parametersRef):
			return params.Concat(r[len(parametersRef):]), nil
		case plain && r.HasPrefix(inventoryRef):
			return inventory.Concat(r[len(inventoryRef):]), nil
		}
		return r, nil
	}
	cp := m.Copy()
	if _, err := ast.TransformRefs(cp, move); err != nil {
		return nil, false
	}
	// ast.Transform leaves the symbols of `some x in xs` as they are: they are moved
	// one by one.
	var err error
	ast.WalkNodes(cp, func(n ast.Node) bool {
		if d, isDecl := n.(*ast.SomeDecl); isDecl && err == nil {
			for _, sym := range d.Symbols {
				var v any
				if v, err = ast.TransformRefs(sym.Value, move); err == nil {
					sym.Value = v.(ast.Value)
				}
			}
		}
		return err != nil
	})
	if err != nil {
		return nil, false
	}
	// Whatever the transformations missed is found here, and the constraint is then
	// evaluated on its own.
	ok = true
	ast.WalkRefs(cp, func(r ast.Ref) bool {
		moved := r.HasPrefix(newOwn) || r.HasPrefix(newLibs)
		ok = ok && !r.HasPrefix(libRoot) && (moved || !r.HasPrefix(own)) &&
			!(plain && (r.HasPrefix(parametersRef) || r.HasPrefix(inventoryRef)))
		return !ok
	})
	return cp, ok
}

// refusedConstraints are the indexes of the constraints whose copies errs are about,
// by the file names of their locations (cN/template.rego, cN/lib_0.rego...).
func refusedConstraints(errs ast.Errors) []int {
	var out []int
	for _, e := range errs {
		if e.Location == nil {
			continue
		}
		name, _, ok := strings.Cut(e.Location.File, "/")
		if !ok || !strings.HasPrefix(name, "c") {
			continue
		}
		if i, err := strconv.Atoi(name[1:]); err == nil && !slices.Contains(out, i) {
			out = append(out, i)
		}
	}
	return out
}

// asTerm hands the batch's result over as it is: each constraint's violations are
// converted to Go only when there are some.
func asTerm(t *ast.Term, _ *rego.EvalContext) (any, error) { return t, nil }

// eval evaluates the matched constraints of one object, as input lists them (see
// batchModule and batchQuery); it returns each one's violation by name, as Rego holds
// it, the direct constraints' and the wrapped ones' (nil unless withWrapped).
func (b *batch) eval(ctx context.Context, input ast.Value, withWrapped bool) (results [2]ast.Object, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("evaluating the batch failed: %v", p)
		}
	}()
	query := b.direct
	if withWrapped {
		query = b.wrapped
	}
	ctx, ended := membudget.Track(ctx)
	rs, err := evalQuery(ctx, query, input, rego.EvalGenerateJSON(asTerm))
	if err = ended(err); err != nil {
		return results, err
	}
	if len(rs) == 0 {
		return results, errors.New("the batch is undefined")
	}
	for i, name := range []string{"direct", "wrapped"} {
		if i == 1 && !withWrapped {
			break
		}
		t, _ := rs[0].Bindings[name].(*ast.Term)
		if t == nil {
			return results, fmt.Errorf("the batch has no %s results", name)
		}
		o, ok := t.Value.(ast.Object)
		if !ok {
			return results, fmt.Errorf("the batch gave %s", short(t))
		}
		results[i] = o
	}
	return results, nil
}
