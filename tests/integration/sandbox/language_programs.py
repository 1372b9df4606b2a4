"""Per language: hello world, a stdin program (reads an integer n, prints 2n), a source that does
not compile (or, for interpreters, does not parse) and a program that never ends."""

from __future__ import annotations

PROGRAMS: dict[str, dict[str, str]] = {
    "c": {
        "hello": '#include <stdio.h>\nint main(void){puts("hello");return 0;}',
        "stdin": '#include <stdio.h>\nint main(void){int n;scanf("%d",&n);printf("%d\\n",2*n);return 0;}',
        "broken": "int main(void){ return y; }",
        "loop": "int main(void){ volatile int x = 0; for(;;) x++; }",
    },
    "java": {
        "hello": 'public class Main { public static void main(String[] a) { System.out.println("hello"); } }',
        "stdin": "import java.util.*;\npublic class Main { public static void main(String[] a) {"
        " Scanner s = new Scanner(System.in); System.out.println(2 * s.nextInt()); } }",
        "broken": "public class Main { public static void main(String[] a) { int x = ; } }",
        "loop": "public class Main { public static void main(String[] a) { while (true) {} } }",
    },
    "go": {
        "hello": 'package main\nimport "fmt"\nfunc main() { fmt.Println("hello") }',
        "stdin": 'package main\nimport "fmt"\nfunc main() { var n int; fmt.Scan(&n); fmt.Println(2 * n) }',
        "broken": "package main\nfunc main() { x := }",
        "loop": "package main\nfunc main() { for {} }",
    },
    "rust": {
        "hello": 'fn main() { println!("hello"); }',
        "stdin": "use std::io::Read;\nfn main() { let mut s = String::new(); std::io::stdin().read_to_string(&mut s)"
        '.unwrap(); let n: i64 = s.trim().parse().unwrap(); println!("{}", 2 * n); }',
        "broken": "fn main() { let x: i32 = ; }",
        "loop": "fn main() { loop {} }",
    },
    "nodejs": {
        "hello": 'console.log("hello");',
        "stdin": 'const n = parseInt(require("fs").readFileSync(0, "utf8")); console.log(2 * n);',
        "broken": "console.log(;",
        "loop": "while (true) {}",
    },
    "typescript": {
        "hello": 'const greeting: string = "hello";\nconsole.log(greeting);',
        # SandboxFusion's own stdin case (test_typescript_stdin): Node's process global, typed
        "stdin": "let data = '';\nprocess.stdin.on('data', (chunk: Buffer) => { data += chunk.toString(); });\n"
        "process.stdin.on('end', () => { const n: number = parseInt(data); console.log(2 * n); });",
        "broken": "const x: number = ;",  # a syntax error (a type error runs, as under SandboxFusion's tsx)
        "loop": "while (true) {}",
    },
    "bash": {
        "hello": "echo hello",
        "stdin": "read n\necho $((2 * n))",
        "broken": "if then fi",
        "loop": "while true; do :; done",
    },
    "pytest": {
        "hello": "def test_hello():\n    print('hello')\n    assert 1 + 1 == 2\n",
        "stdin": "def test_double():\n    assert 2 * 21 == 42\n",
        "broken": "def test_x(:\n    pass\n",
        "loop": "def test_forever():\n    while True:\n        pass\n",
    },
    "php": {
        "hello": '<?php echo "hello\\n";',
        "stdin": '<?php $n = intval(trim(fgets(STDIN))); echo (2 * $n) . "\\n";',
        "broken": "<?php echo (;",
        "loop": "<?php while (true) {}",
    },
    "ruby": {
        "hello": 'puts "hello"',
        "stdin": "n = STDIN.read.to_i\nputs 2 * n",
        "broken": "puts (",
        "loop": "loop do end",
    },
    "lua": {
        "hello": 'print("hello")',
        "stdin": 'local n = io.read("n")\nprint(math.floor(2 * n))',
        "broken": "print(",
        "loop": "while true do end",
    },
    "perl": {
        "hello": 'print "hello\\n";',
        "stdin": 'my $n = <STDIN>; print 2 * $n, "\\n";',
        "broken": "print (;",
        "loop": "while (1) {}",
    },
    "R": {
        "hello": 'cat("hello\\n")',
        "stdin": 'n <- as.integer(readLines(file("stdin"), n = 1))\ncat(2 * n, "\\n", sep = "")',
        "broken": "cat(",
        "loop": "while (TRUE) {}",
    },
    "scala": {
        "hello": 'object Main { def main(a: Array[String]): Unit = println("hello") }',
        "stdin": "object Main { def main(a: Array[String]): Unit = println(2 * scala.io.StdIn.readLine().trim.toInt) }",
        "broken": "object Main { def main(a: Array[String]): Unit = { val x: Int = } }",
        "loop": "object Main { def main(a: Array[String]): Unit = while (true) {} }",
    },
    "kotlin": {
        "hello": 'fun main() { println("hello") }',
        "stdin": "fun main() { println(2 * readLine()!!.trim().toInt()) }",
        "broken": "fun main() { val x: Int = }",
        "loop": "fun main() { while (true) {} }",
    },
    "csharp": {
        "hello": 'class P { static void Main() { System.Console.WriteLine("hello"); } }',
        "stdin": "class P { static void Main() { int n = int.Parse(System.Console.ReadLine().Trim());"
        " System.Console.WriteLine(2 * n); } }",
        "broken": "class P { static void Main() { int x = ; } }",
        "loop": "class P { static void Main() { while (true) {} } }",
    },
    "D": {
        "hello": 'import std.stdio;\nvoid main() { writeln("hello"); }',
        "stdin": "import std.stdio, std.conv, std.string;\nvoid main() { auto n = readln().strip().to!int;"
        " writeln(2 * n); }",
        "broken": "void main() { int x = ; }",
        "loop": "void main() { while (true) {} }",
    },
    "racket": {
        "hello": '#lang racket\n(displayln "hello")',
        "stdin": "#lang racket\n(displayln (* 2 (read)))",
        "broken": "#lang racket\n(displayln",
        "loop": "#lang racket\n(let loop () (loop))",
    },
}
