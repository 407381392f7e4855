"""The word lists of the fact extractor (``core.fact_extraction``): data, no code.

Each ``*_PATTERNS`` tuple holds the alternatives of a regular expression, joined with ``|`` (an entry may
hold regex syntax: ``SmolLM2?``, ``Node(?:\\.js)?``); their order is the order in which they are tried.
The other tuples hold exact words, looked up as sets.
"""

from __future__ import annotations

# --- alternatives of regular expressions ---
EXTENSIONS_PATTERNS = (
    "py", "pyi", "ts", "tsx", "js", "jsx", "mjs", "cjs", "json", "md", "rst", "txt", "yml", "yaml", "toml", "cfg",
    "ini", "conf", "env", "sql", "sh", "bash", "go", "rs", "java", "kt", "rb", "php", "html", "css", "scss", "vue",
    "svelte", "c", "h", "cpp", "hpp", "cs", "swift", "lua", "dart", "tf", "hcl", "proto", "xml", "csv", "tsv",
    "log", "lock", "ipynb", "parquet", "sqlite", "db", "pdf", "docx", "xlsx", "xls", "ods", "odt", "pptx", "png",
    "jpg", "jpeg", "svg", "gif", "webp", "zip", "gz", "tgz", "bat", "ps1",
)  # fmt: skip
TLDS_PATTERNS = (
    "com", "org", "net", "io", "dev", "app", "ai", "co", "uk", "de", "fr", "nl", "eu", "ca", "au", "jp", "ch",
    "se", "es", "pl", "cz", "internal", "local", "lan", "corp", "intra", "cloud", "tech", "sh", "info", "biz",
    "xyz", "site", "online", "gov", "edu", "svc",
)  # fmt: skip
AZURE_REGIONS_PATTERNS = (
    "eastus2?", "westus[23]?", "centralus", "northcentralus", "southcentralus", "westcentralus", "westeurope",
    "northeurope", "uksouth", "ukwest", "francecentral", "germanywestcentral", "swedencentral", "switzerlandnorth",
    "norwayeast", "polandcentral", "japaneast", "japanwest", "koreacentral", "southeastasia", "eastasia",
    "australiaeast", "australiasoutheast", "canadacentral", "canadaeast", "brazilsouth", "southafricanorth",
    "centralindia", "uaenorth",
)  # fmt: skip
DIRECTIONS_PATTERNS = (
    "north", "south", "east", "west", "central", "northeast", "southeast", "northwest", "southwest",
)  # fmt: skip
PRODUCTS_PATTERNS = (
    "Python", "python", "Django", "django", "Node(?:\\.js)?", "node", "PostgreSQL", "Postgres", "postgres",
    "postgresql", "Redis", "redis", "Ubuntu", "ubuntu", "Debian", "debian", "Alpine", "alpine", "Java", "java",
    "JDK", "Go", "Golang", "Rust", "rust", "Ruby", "ruby", "Rails", "rails", "PHP", "php", "Perl", "React",
    "react", "Vue", "vue", "Angular", "Svelte", "Next\\.js", "Kubernetes", "kubernetes", "Docker", "docker",
    "nginx", "Nginx", "MySQL", "mysql", "MariaDB", "MongoDB", "mongodb", "Elasticsearch", "Kafka", "kafka",
    "Terraform", "terraform", "Ansible", "CentOS", "RHEL", "Fedora", "Windows", "macOS", "iOS", "Android",
    "TypeScript", "Swift", "Kotlin", "Scala", "GCC", "gcc", "Clang", "LLVM", "CUDA", "OpenSSL", "Flask", "FastAPI",
    "Laravel", "Celery", "celery", "Gunicorn", "gunicorn", "SQLite", "sqlite", "Helm", "helm", "Grafana",
    "Prometheus", "Airflow", "Spark", "TLS", "OAuth", "Llama", "GPT", "Gemma", "Qwen", "Mistral", "Phi",
    "SmolLM2?", "Webpack", "Vite", "Deno", "npm", "pip", "PyTorch", "TensorFlow", "NumPy", "numpy", "pandas",
    "Jenkins", "GitLab", "Electron", "Chrome", "Firefox", "Safari", "Tomcat", "Spring Boot", "\\.NET", "Hibernate",
    "Express", "Tailwind", "Bootstrap", "Traefik", "Envoy", "Istio", "Consul", "Vault", "etcd", "RabbitMQ",
    "ClickHouse", "Cassandra", "Memcached", "HAProxy", "Keycloak", "Sentry", "Debezium", "pgbouncer", "PgBouncer",
    "Nextcloud", "Jira", "Confluence", "Postfix", "OpenSearch", "Kibana", "Logstash", "Linux", "Xcode", "Unity",
    "Unreal",
)  # fmt: skip
MONTHS_PATTERNS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November",
    "December",
)  # fmt: skip
MONTH_ABBREVIATIONS_PATTERNS = (
    "Jan", "Feb", "Mar", "Apr", "Jun", "Jul", "Aug", "Sep", "Sept", "Oct", "Nov", "Dec",
)  # fmt: skip
WEEKDAYS_PATTERNS = (
    "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday",
)  # fmt: skip
TIMEZONES_PATTERNS = (
    "UTC", "GMT", "CET", "CEST", "EET", "EEST", "WET", "BST", "EST", "EDT", "CST", "CDT", "MST", "MDT", "PST",
    "PDT", "IST", "JST", "KST", "AEST", "AEDT", "Z",
)  # fmt: skip
UNITS_PATTERNS = (
    "%", "‰", "ms", "µs", "μs", "us", "ns", "s", "secs?", "seconds?", "mins?", "minutes?", "h", "hrs?", "hours?",
    "days?", "weeks?", "months?", "years?", "yrs?", "km", "m", "cm", "mm", "µm", "nm", "mi", "ft", "kg", "g", "mg",
    "t", "tons?", "tonnes?", "lbs?", "oz", "L", "ml", "mL", "°C", "°F", "C", "W", "kW", "MW", "GW", "kWh", "MWh",
    "Wh", "V", "mV", "mA", "mAh", "Hz", "kHz", "MHz", "GHz", "dB", "PB", "TB", "GB", "MB", "KB", "kB", "TiB",
    "GiB", "MiB", "KiB", "bytes?", "bits?", "Gbps", "Mbps", "kbps", "px", "pt", "dpi", "k", "K", "M", "bn",
    "million", "billion", "x", "×", "tokens?", "USD", "EUR", "GBP", "CHF", "JPY", "€", "\\$", "£", "rps", "qps",
    "tps", "rpm", "req/s", "ops/s", "vCPUs?", "CPUs?", "cores?", "GPUs?", "threads?", "replicas?", "nodes?",
    "pods?", "shards?", "partitions?", "workers?", "instances?", "servers?", "connections?", "retries",
    "attempts?", "rounds?", "requests?", "users?", "rows?", "records?", "items?", "units?", "epochs?", "layers?",
    "customers?", "orders?", "seats?", "licen[cs]es?", "loaves", "bikes?", "containers?", "VMs?", "hosts?",
    "disks?", "volumes?", "regions?", "zones?",
)  # fmt: skip
PER_PATTERNS = (
    "s", "sec", "second", "min", "minute", "h", "hour", "day", "week", "month", "year", "user", "request", "node",
    "core", "seat", "GB", "TB", "run", "call", "host", "instance", "replica", "customer", "order",
)  # fmt: skip
CONTEXT_NOUNS_PATTERNS = (
    "service", "services", "flag", "flags", "repo", "repository", "bucket", "branch", "queue", "topic",
    "namespace", "cluster", "container", "image", "job", "table", "module", "package", "library", "crate", "chart",
    "deployment", "pod", "lambda", "function", "pipeline", "channel", "endpoint", "tag", "label", "workspace",
    "database", "schema", "index", "microservice", "toggle", "env var", "variable", "stack", "app", "project",
    "workflow", "secret",
)  # fmt: skip
ROLE_AFTER_PATTERNS = (
    "approved", "approves", "owns", "leads", "led", "said", "says", "asked", "asks", "agreed", "agrees",
    "confirmed", "confirms", "signed\\s+off", "suggested", "suggests", "wants", "wanted", "wrote", "reviewed",
    "reviews", "mentioned", "proposed", "decided", "prefers", "objected", "is\\s+on[\\s-]call", "is\\s+out",
    "is\\s+leading", "is\\s+away", "handles", "manages", "reported", "noted",
    "will\\s+(?:review|approve|own|lead|check|handle|sign|decide|present|join)",
    "is\\s+(?:the\\s+)?(?:owner|lead|reviewer|manager|approver)",
    "(?:is|will\\s+be)\\s+(?:off|on\\s+leave|on\\s+holiday|back)",
)  # fmt: skip
ROLE_BEFORE_PATTERNS = (
    "ask", "asked", "ping", "pinged", "cc", "thanks", "thank\\s+you", "tell", "told", "email", "emailed",
    "contact", "talk\\s+to", "talked\\s+to", "check\\s+with", "checked\\s+with", "met\\s+with", "meet\\s+with",
    "hand\\s+(?:it\\s+)?over\\s+to", "handed\\s+(?:it\\s+)?over\\s+to", "owner:", "owners:", "assignee:",
    "assigned\\s+to", "reviewer:", "reviewers:", "reviewed\\s+by", "approved\\s+by", "approver:", "led\\s+by",
    "owned\\s+by", "signed\\s+off\\s+by", "on[\\s-]call:", "lead:", "manager:", "contact:", "author:", "@",
)  # fmt: skip

# --- words ---
ROOT_DIRS = (
    "app", "bin", "boot", "data", "dev", "etc", "home", "lib", "media", "mnt", "opt", "proc", "root", "run", "srv",
    "sys", "tmp", "usr", "var", "volumes", "workspace",
)  # fmt: skip
HOST_WORDS = (
    "api", "app", "backup", "bastion", "broker", "build", "cache", "ci", "cpu", "db", "ec2", "edge", "es",
    "gateway", "gpu", "gw", "host", "ip", "jump", "k8s", "kafka", "lb", "mq", "mysql", "nas", "node", "pg",
    "postgres", "primary", "prod", "proxy", "redis", "replica", "runner", "server", "srv", "staging", "stg", "vm",
    "web", "worker",
)  # fmt: skip
TECH_SUFFIXES = (
    "agent", "api", "apis", "app", "auth", "backend", "bot", "broker", "bucket", "bus", "cache", "canary", "chart",
    "cli", "cluster", "config", "configs", "consumer", "controller", "core", "cron", "daemon", "db", "etl",
    "exporter", "fn", "frontend", "gateway", "gw", "helm", "infra", "ingest", "ingester", "job", "jobs", "k8s",
    "lambda", "lib", "operator", "pipeline", "prod", "producer", "proxy", "queue", "repo", "runner", "scheduler",
    "sdk", "secrets", "server", "service", "services", "sidecar", "staging", "stg", "store", "stream", "svc",
    "sync", "topic", "ui", "v1", "v2", "v3", "web", "webhook", "webhooks", "worker", "workers",
)  # fmt: skip
TECH_PREFIXES = (
    "api", "ci", "feat", "ff", "flag", "gh", "k8s", "prod", "staging", "stg", "svc", "tf",
)  # fmt: skip
ENGLISH_PREFIXES = (
    "add", "all", "anti", "back", "best", "big", "built", "co", "cross", "cut", "day", "e", "end", "ex", "fine",
    "first", "follow", "front", "full", "half", "hand", "hard", "high", "in", "large", "last", "little", "long",
    "low", "month", "multi", "new", "next", "non", "off", "old", "on", "one", "open", "opt", "out", "part", "plug",
    "pre", "re", "read", "real", "roll", "same", "second", "self", "semi", "short", "sign", "single", "small",
    "so", "soft", "sub", "third", "three", "top", "two", "up", "week", "well", "x", "year", "zero",
)  # fmt: skip
STOP_OBJECTS = (
    "a", "all", "an", "and", "any", "as", "at", "be", "but", "by", "case", "cases", "for", "he", "her", "him",
    "his", "i", "if", "in", "is", "it", "its", "less", "many", "me", "more", "much", "my", "of", "on", "one", "or",
    "our", "she", "so", "some", "that", "the", "their", "them", "then", "these", "they", "this", "those", "to",
    "too", "up", "us", "very", "was", "we", "what", "whatever", "when", "which", "with", "you", "your",
)  # fmt: skip
FIRST_NAMES = (
    "Aaron", "Abdul", "Abigail", "Adam", "Adebayo", "Adrian", "Ahmed", "Ahmet", "Aiko", "Aisha", "Akira", "Alan",
    "Albert", "Alejandro", "Aleksandr", "Alessandro", "Alex", "Alexander", "Alexandra", "Alexis", "Alfred", "Ali",
    "Alice", "Alicia", "Alina", "Alison", "Amanda", "Amara", "Amelia", "Amir", "Amit", "Amy", "Ana", "Anders",
    "Andrea", "Andreas", "Andrei", "Andrew", "Andy", "Aneta", "Angela", "Anika", "Anil", "Anita", "Anja", "Ann",
    "Anna", "Anne", "Annika", "Anthony", "Anton", "Antonio", "Anya", "Arjun", "Arnav", "Arthur", "Astrid",
    "Ayesha", "Barbara", "Beatriz", "Ben", "Benjamin", "Bernard", "Bjorn", "Björn", "Boris", "Brandon", "Brian",
    "Bruno", "Caitlin", "Camila", "Carla", "Carlos", "Carmen", "Caroline", "Carsten", "Catherine", "Cecilia",
    "Charles", "Charlie", "Chen", "Chiara", "Chloe", "Chris", "Christian", "Christina", "Christine", "Christopher",
    "Claire", "Clara", "Claudia", "Colin", "Connor", "Craig", "Cristina", "Daisuke", "Dan", "Daniel", "Daniela",
    "Daniele", "Danny", "Darius", "David", "Deepak", "Deepika", "Denis", "Dennis", "Diana", "Diego", "Dimitri",
    "Dmitri", "Dmitry", "Dominik", "Dora", "Doris", "Duc", "Dylan", "Edward", "Elena", "Eli", "Elias", "Elif",
    "Elijah", "Elisa", "Elizabeth", "Ella", "Ellen", "Emil", "Emily", "Emma", "Emre", "Enrico", "Eric", "Erik",
    "Ethan", "Eva", "Evan", "Fabian", "Fatima", "Felix", "Fernando", "Filip", "Finn", "Fiona", "Florian",
    "Francesca", "Francesco", "Franz", "Freya", "Gabriel", "Gabriela", "Gary", "George", "Gerhard", "Giorgio",
    "Giulia", "Giuseppe", "Greg", "Gregory", "Gustavo", "Hamid", "Hana", "Hannah", "Hans", "Harper", "Harry",
    "Hassan", "Heidi", "Helen", "Helena", "Henrik", "Henry", "Hiroshi", "Hugo", "Ian", "Ibrahim", "Igor", "Ilya",
    "Ines", "Ingrid", "Inés", "Irene", "Isaac", "Isabel", "Isabella", "Ivan", "Jacob", "Jakob", "Jakub", "James",
    "Jamie", "Jan", "Jana", "Jane", "Janet", "Jasmine", "Jason", "Javier", "Jean-Luc", "Jeff", "Jennifer", "Jens",
    "Jessica", "Jiho", "Jin", "Joanna", "Joao", "Joe", "Johan", "Johanna", "John", "Jonas", "Jonathan", "Jorge",
    "Jose", "Joseph", "Josh", "Joshua", "José", "João", "Juan", "Julian", "Julie", "Julien", "Jun", "Jürgen",
    "Kai", "Kamal", "Karen", "Karim", "Karl", "Karolina", "Kasia", "Kate", "Katharina", "Katie", "Kavya", "Keiko",
    "Ken", "Kenji", "Kevin", "Kim", "Klaus", "Kofi", "Kristina", "Kumar", "Kwame", "Lakshmi", "Lara", "Lars",
    "Laura", "Lauren", "Leila", "Lena", "Leo", "Leon", "Leonardo", "Liam", "Lin", "Linda", "Lisa", "Liu",
    "Lorenzo", "Lucas", "Lucia", "Lucy", "Luis", "Luka", "Lukas", "Luke", "Magnus", "Mai", "Malik", "Manuel",
    "Marc", "Marco", "Marcus", "Margaret", "Maria", "Marie", "Marina", "Mario", "Marta", "Martin", "María",
    "Mateo", "Matteo", "Matthew", "Matthias", "Maya", "Mehmet", "Mei", "Melanie", "Mia", "Michael", "Michał",
    "Michel", "Michelle", "Miguel", "Mika", "Mike", "Mikhail", "Milan", "Ming", "Miriam", "Mohamed", "Mohammed",
    "Monica", "Nadia", "Naomi", "Natalia", "Natasha", "Nathan", "Neha", "Nia", "Nicholas", "Nick", "Nicolas",
    "Nicole", "Nikhil", "Nikita", "Nikolai", "Nils", "Nina", "Noah", "Noor", "Nora", "Odile", "Olga", "Oliver",
    "Olivia", "Omar", "Oscar", "Pablo", "Paolo", "Patrick", "Paul", "Paula", "Pavel", "Pedro", "Peter", "Petra",
    "Philipp", "Pierre", "Pietro", "Pooja", "Prakash", "Priya", "Rachel", "Rafael", "Rahul", "Raj", "Rajesh",
    "Raphael", "Ravi", "Rebecca", "Ricardo", "Richard", "Rita", "Robert", "Roberto", "Rohan", "Roman", "Rosa",
    "Ruben", "Rui", "Ryan", "Sabine", "Sadia", "Salma", "Sam", "Samir", "Samuel", "Sandra", "Santiago", "Sara",
    "Sarah", "Sasha", "Satoshi", "Sean", "Sebastian", "Sergei", "Sergey", "Seung", "Shreya", "Simon", "Simone",
    "Sofia", "Sofía", "Sophia", "Sophie", "Stefan", "Stefano", "Stephanie", "Steven", "Sunil", "Susan", "Svetlana",
    "Takeshi", "Tanvir", "Tara", "Teresa", "Thomas", "Tim", "Timo", "Tobias", "Tom", "Tomas", "Tomasz", "Tomás",
    "Tony", "Valentina", "Vanessa", "Vera", "Vikram", "Viktor", "Vincent", "Vivek", "Wei", "Wojciech", "Xavier",
    "Xin", "Yan", "Yannick", "Yara", "Yasmin", "Yuki", "Yusuf", "Yuto", "Zainab", "Zara", "Zoe", "Zoltan", "Zoran",
)  # fmt: skip
AMBIGUOUS_NAMES = (
    "Ada", "Amber", "Angel", "April", "Art", "Ash", "August", "Austin", "Autumn", "Bill", "Bob", "Buck", "Carol",
    "Charlotte", "Chase", "Chelsea", "Cole", "Crystal", "Dale", "Dawn", "Dev", "Don", "Drew", "Eve", "Faith",
    "Florence", "Frank", "Gene", "Georgia", "Glen", "Grace", "Grant", "Guy", "Holly", "Hope", "Hunter", "Iris",
    "Ivy", "Jack", "Jade", "Jordan", "Joy", "Julia", "June", "Kit", "Lane", "Lee", "Lou", "Madison", "Mark", "Max",
    "May", "Miles", "Nat", "Page", "Paris", "Pascal", "Pat", "Penny", "Phoenix", "Ray", "Reed", "Rich", "Robin",
    "Rose", "Ruby", "Sage", "Sandy", "Skip", "Sky", "Sterling", "Sue", "Summer", "Sydney", "Ted", "Val",
    "Victoria", "Wade", "Will",
)  # fmt: skip
CAPITALIZED_WORDS = (
    "A", "AWS", "Admin", "After", "Again", "Agreed", "All", "Also", "Amazon", "An", "And", "Any", "Anyone",
    "Apple", "Approved", "Approver", "April", "Are", "As", "Ask", "At", "August", "Avenue", "Azure", "Because",
    "Before", "Best", "Big", "Both", "Branch", "Build", "But", "By", "CC", "Call", "Can", "Cc", "Central",
    "Cheers", "Close", "Cloud", "Contact", "Corp", "Could", "Data", "Day", "Dear", "December", "Department",
    "Design", "Did", "Do", "Docker", "Does", "Done", "Dr", "Each", "East", "Either", "Email", "Engineering",
    "Environment", "Even", "Evening", "Every", "Everyone", "February", "Finally", "Finance", "First", "For",
    "Friday", "From", "Fwd", "GitHub", "Good", "Google", "Great", "Group", "Had", "Has", "Have", "He", "Hello",
    "Her", "Here", "Hey", "Hi", "High", "His", "How", "However", "I", "If", "In", "Inc", "Infrastructure", "Is",
    "It", "Its", "January", "Jira", "July", "June", "Just", "Kafka", "Kind", "Lab", "Labs", "Last", "Lead",
    "Legal", "Let", "Linux", "Local", "Low", "Ltd", "Madam", "Management", "Manager", "March", "Marketing", "May",
    "Maybe", "Meanwhile", "Meeting", "Meta", "Microsoft", "Mode", "Monday", "Month", "Morning", "Mr", "Mrs", "Ms",
    "My", "Neither", "New", "Next", "Night", "No", "Nobody", "North", "Not", "Note", "Notes", "November", "Now",
    "OK", "October", "Of", "Okay", "Old", "On", "Once", "Only", "Open", "Ops", "Or", "Our", "Overall", "Owner",
    "Per", "Perhaps", "Phase", "Ping", "Plan", "Platform", "Please", "Postgres", "Prod", "Product", "Prof",
    "Project", "Python", "Re", "Redis", "Regards", "Release", "Remote", "Review", "Reviewer", "Road", "Sales",
    "Saturday", "Security", "September", "Server", "Service", "Services", "She", "Should", "Signed", "Since",
    "Sir", "Slack", "Small", "So", "Some", "Somebody", "South", "Staging", "Step", "Still", "Street", "Stripe",
    "Subject", "Sunday", "Support", "Sure", "Sync", "Team", "Tell", "Test", "Tests", "Thank", "Thanks", "That",
    "The", "Their", "Then", "There", "These", "They", "This", "Those", "Thursday", "To", "Today", "Tomorrow",
    "Tools", "Tuesday", "University", "Update", "Version", "Via", "Was", "We", "Wednesday", "Week", "Weekend",
    "Welcome", "Were", "West", "What", "When", "Where", "Which", "While", "Who", "Why", "With", "Without", "Would",
    "Year", "Yes", "Yesterday", "You", "Your",
)  # fmt: skip
